"""One view per file; each takes its theme in __init__ and redraws from a History on demand."""
