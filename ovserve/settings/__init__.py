"""Settings: the schema of every server and model setting (flags, environment, OVMS config.json)
and the reader of OVMS graph.pbtxt files."""
