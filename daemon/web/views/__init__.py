"""What the console's pages show, read from the daemon's own stores (no HTML here).

One module per page; each function takes the running daemon's `Services` and returns plain
data for a template, through the same query code the CLI commands use.
"""
