"""The local web console: an ASGI app the daemon serves on loopback or a Unix socket.

`app` builds it (routes, templates, the login guard), `server` runs it in the daemon's task
group, `auth` keeps the token, sessions and CSRF, `live` streams the bus to open pages,
`chat` makes a page a client of the chat gateway; `pages` holds what each page shows.
"""
