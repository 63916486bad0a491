"""Layer 7: the typer CLI and the recipe it runs."""
