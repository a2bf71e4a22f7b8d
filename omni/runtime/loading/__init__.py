"""Finding and loading models: the catalogue, model sources, GGUF conversion, the hub, the
default models' wheels and the weights' formats."""
