"""boxmaker's shared core: the wire, labels, ids, tool descriptions, home layout and config.

Every service imports this package; it never imports a service.
"""

__version__ = "0.1.0"
