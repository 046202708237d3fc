"""Client unit tests: the clients against scripted in-memory servers (``_memory``)."""
