"""The OpenAI protocol: the recorders that turn engine outputs into Responses and chat events,
thinking, stop strings (tool calls and their grammars: omni.tools). Pure Python: no MLX, no
database."""
