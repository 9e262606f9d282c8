"""The shared core: operations both API front-ends call (containers, memories, search).

Core functions take a :class:`proxy.core.services.Services` first and raise :mod:`proxy.errors` kinds;
they never see HTTP and never build wire formats.
"""
