# What the package exports. __init__.py loads each name on first use (lazy_loader).

from .app import create_app
from .bridge import Choice, SessionTrace
from .completion import Completer
from .requests import Request, RequestError
from .server import running
from .sessions import Sessions, UnknownSession

__all__ = ["Choice", "Completer", "Request", "RequestError", "SessionTrace", "Sessions",
           "UnknownSession", "create_app", "running"]
