"""The directory and its index: step directories listed, read, kept or swept, catalogued,
and the timeline after a restore of an older step."""
