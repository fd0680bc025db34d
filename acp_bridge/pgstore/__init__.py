"""The shared store in PostgreSQL (issue 23): the schema and its migrations (:mod:`.schema`),
ownership across hosts with a fencing token (:mod:`.lease`), waking an owner through
LISTEN/NOTIFY (:mod:`.notify`), the queue (:mod:`.queue`) and the conversations with their
event logs (:mod:`.conversations`), over psycopg 3 synchronous connections run in worker
threads (:mod:`.connection`). Requires the ``postgres`` extra; nothing imports this package
unless a ``postgresql://`` store is used."""
