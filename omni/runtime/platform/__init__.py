"""What the machine gives the runtime: the BLAS, one-row products, CPU attention, the device
and the libraries' start-up chatter."""
