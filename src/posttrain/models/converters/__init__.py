"""Model files of other formats turned into Hugging Face model directories (GGUF)."""
