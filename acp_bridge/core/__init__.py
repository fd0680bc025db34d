"""The one core under every front-end (the library, the proxy, the host).

It owns what each front-end would otherwise write again: the agent lifecycle machine and the
generation loop that performs it, the restore plan, the turn machine, and the one condition
primitive waiters wake through. A front-end plugs in its own kind of generation (a typed client
connection, a raw relay) and never reimplements a lifecycle.
"""
