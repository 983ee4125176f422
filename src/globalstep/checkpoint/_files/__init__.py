"""The files on disk: the safetensors array file and its I/O, the sealed JSON documents,
the commit protocol, lazy reads."""
