"""llama.cpp's own server as TuneDesk's CPU engine: the process, its upstreams, the engine."""
