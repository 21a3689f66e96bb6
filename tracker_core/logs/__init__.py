"""Training logs a resume continues: what the adapters rewind to the checkpoint's step."""
