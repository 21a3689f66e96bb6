"""The saved form and its validation: the schema, plain-data readers and codecs, partial gradients."""
