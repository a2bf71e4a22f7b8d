"""What a service may ask of a runtime (the model in a process of its own), one module per
modality on one Model protocol, and the values that cross between them."""
