"""The wire contract: key names, Lua scripts and pure operations. No I/O here.

Everything another language needs to interoperate is specified in
`docs/protocol.md`; this package is the Python rendering of it.
"""

from conveyor.protocol.keys import PROTOCOL_VERSION, QueueKeys
from conveyor.protocol.scripts import SCRIPT_NAMES, Script, load_script

__all__ = ["PROTOCOL_VERSION", "SCRIPT_NAMES", "QueueKeys", "Script", "load_script"]
