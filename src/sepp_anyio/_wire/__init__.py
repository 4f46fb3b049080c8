"""Public <-> protobuf conversion and the compiled protobuf codecs."""
