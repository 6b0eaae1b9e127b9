"""A jeepney connection straight to ordod's listening socket (ordod --listen):
peer to peer, so no Hello and no destination. Used by harness.py and by
policy_client.py (which runs as another user with only jeepney and this file
beside it)."""
from jeepney import HeaderFields
from jeepney.bus import get_connectable_addresses
from jeepney.io.blocking import DBusConnection, DBusConnectionBase, prep_socket
from jeepney.io.common import MessageFilters


class DirectConnection(DBusConnection):
    def __init__(self, address):
        DBusConnectionBase.__init__(self, prep_socket(next(get_connectable_addresses(address))))
        self._filters = MessageFilters()
        self.unique_name = ""  # the service names the peer; nothing tells the peer

    def send(self, message, serial=None):
        message.header.fields.pop(HeaderFields.destination, None)
        super().send(message, serial)


def connect(address, direct):
    """A connection to the bus daemon at `address`, or with `direct` to the
    ordod listening there."""
    if direct:
        return DirectConnection(address)
    from jeepney.io.blocking import open_dbus_connection
    return open_dbus_connection(address)
