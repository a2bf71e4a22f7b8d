"""The OpenAI protocol: the recorders that turn engine outputs into Responses and chat events,
tool-call formats and grammars, thinking, stop strings. Pure Python: no MLX, no database."""
