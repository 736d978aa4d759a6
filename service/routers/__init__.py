"""HTTP routers, one concern each."""
