"""The chat engine: a text model in an engine process of its own, its jobs decoded together by
continuous batching (the scheduler), their outputs detokenized in the server (the engine)."""
