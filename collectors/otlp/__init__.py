"""OTLP in: pure decoding and encoding (``decode``, ``encode``), and the transports that call
them (``http``, ``grpc``). The transports know only an ``enqueue`` callable, never the store."""
