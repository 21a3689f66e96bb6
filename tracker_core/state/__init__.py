"""The saved form and its validation: the schema, plain-data readers and codecs, migrations, partial gradients."""
