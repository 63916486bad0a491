"""The typer CLI (``posttrain``): every command, and ``posttrain doctor``."""
