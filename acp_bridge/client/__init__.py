"""The typed ACP client side: a supervised agent, its sessions and turns, and what the bridge
serves to the agent (permissions, files, terminals)."""
