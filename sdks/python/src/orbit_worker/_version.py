"""The SDK's name and version, as sent in ``Hello.sdk`` and ``Hello.runtime``."""

import platform

__version__ = "0.1.0"
#: ``Hello.sdk``: ``<sdk name> <version>`` (sdks/conformance/README.md).
SDK = f"orbit-python {__version__}"
#: ``Hello.runtime``: the interpreter, e.g. ``python 3.11.7``.
RUNTIME = f"python {platform.python_version()}"
