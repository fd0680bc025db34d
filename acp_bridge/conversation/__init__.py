"""The conversation layer: a durable FIFO queue of user messages, one agent turn each."""
