"""Tools and their grammar: which tools a request may call (policy), the grammar its output
must follow (schema, grammar, families), and calls read back out of the text (calls, cut).
Pure: values in, values out; below the protocol, the runtime and the service."""
