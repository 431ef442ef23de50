"""The composition root's parts: one function per system, each building it on what came before.

`daemon.services.open_services` calls them in order (the list of systems is read there); each
enters its service on the one exit stack of `Core`, registers its listeners there, and returns
what later systems need. Nothing here runs on its own.
"""
