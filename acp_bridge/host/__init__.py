"""The conversation host (issue 22): many clients on one durable conversation.

``endpoint`` finds and guards the Unix socket; ``serve`` runs the listener; ``acp_server``
speaks ACP to each connection; ``conversations`` keeps the open conversations; ``clients``
bounds what each connected client is owed. host/ sits between cli/ and conversation/ + proxy/:
it never imports cli/.
"""
