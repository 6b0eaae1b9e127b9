// Generated from docs/dev.ordo.Bus1.xml (a test checks they are identical):
//   make dbus-introspection

/// The introspection XML of `/dev/ordo/Bus`, as shipped in `docs/dev.ordo.Bus1.xml`.
public let introspectionXML: String = #"""
<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
<!--
  dev.ordo.Bus1: an Ordo change-notification bus published over D-Bus.
  Object /dev/ordo/Bus, well-known name dev.ordo.Bus (configurable).
  Values travel as variants of type b, x, d, s or ay. Errors are named
  dev.ordo.Error.<Name> (InvalidArgument, InvalidKeypath, TypeMismatch,
  NotFound, NoTransaction, ContractViolation, Stability, Cycle, OrderConflict,
  DuplicateName, Limit, Storage, Schema, Conflict, AccessDenied, Dbus,
  Internal), or
  org.freedesktop.DBus.Error.InvalidArgs for a wrong signature, value type or
  option type. See docs/dbus.md.
-->
<node name="/dev/ordo/Bus">
  <interface name="dev.ordo.Bus1">
    <!-- Registers a contract; its Notify signals go to the caller only.
         options: priority (i), notify-initial (b), timeout-ms (u), cache
         (b: each Notify carries what a client-side cache of the read set
         needs; implies notify-initial; see docs/dbus.md, "Consistent
         reads"). -->
    <method name="Register">
      <arg name="name" type="s" direction="in"/>
      <arg name="reads" type="as" direction="in"/>
      <arg name="writes" type="as" direction="in"/>
      <arg name="options" type="a{sv}" direction="in"/>
      <arg name="contract" type="o" direction="out"/>
    </method>
    <!-- Only the peer that registered the contract may unregister it. -->
    <method name="Unregister">
      <arg name="contract" type="o" direction="in"/>
    </method>
    <!-- One atomic transaction: set, then touch, then remove (an entry
         ending in ".**" removes the tree). Returns 0 if nothing changed. -->
    <method name="Commit">
      <arg name="set" type="a{sv}" direction="in"/>
      <arg name="touch" type="as" direction="in"/>
      <arg name="remove" type="as" direction="in"/>
      <arg name="txn" type="t" direction="out"/>
    </method>
    <!-- Commit with options (SPEC 15): expect (a{st}, keypath to counter:
         if one has moved, nothing is applied and the call fails with
         dev.ordo.Error.Conflict; needs the read right on those keypaths) and
         owned (b: the values it sets belong to the caller and are removed,
         in one transaction, when it leaves). Unknown options and options of
         another type are org.freedesktop.DBus.Error.InvalidArgs. -->
    <method name="CommitWith">
      <arg name="set" type="a{sv}" direction="in"/>
      <arg name="touch" type="as" direction="in"/>
      <arg name="remove" type="as" direction="in"/>
      <arg name="options" type="a{sv}" direction="in"/>
      <arg name="txn" type="t" direction="out"/>
    </method>
    <!-- The owned values among the keypaths matching the patterns that the
         caller may read: keypath to owner (the owning peer's unique name). -->
    <method name="Owners">
      <arg name="patterns" type="as" direction="in"/>
      <arg name="owners" type="a{ss}" direction="out"/>
    </method>
    <method name="Get">
      <arg name="keypath" type="s" direction="in"/>
      <arg name="value" type="v" direction="out"/>
      <arg name="counter" type="t" direction="out"/>
    </method>
    <method name="Snapshot">
      <arg name="patterns" type="as" direction="in"/>
      <arg name="values" type="a{sv}" direction="out"/>
      <arg name="counters" type="a{st}" direction="out"/>
      <arg name="txn" type="t" direction="out"/>
    </method>
    <!-- What changed after transaction "since" (SPEC 10): every keypath
         matching a pattern whose changed-at is greater, with its value, or
         in "removed" when it holds none; "txn" is the last committed id.
         "since" after it is dev.ordo.Error.InvalidArgument (another epoch). -->
    <method name="Changes">
      <arg name="since" type="t" direction="in"/>
      <arg name="patterns" type="as" direction="in"/>
      <arg name="values" type="a{sv}" direction="out"/>
      <arg name="removed" type="as" direction="out"/>
      <arg name="counters" type="a{st}" direction="out"/>
      <arg name="txn" type="t" direction="out"/>
    </method>
    <!-- A writer contract's answer to its Notify: its writes, all or nothing. -->
    <method name="Complete">
      <arg name="contract" type="o" direction="in"/>
      <arg name="txn" type="t" direction="in"/>
      <arg name="set" type="a{sv}" direction="in"/>
      <arg name="touch" type="as" direction="in"/>
      <arg name="remove" type="as" direction="in"/>
    </method>
    <method name="Contracts">
      <arg name="contracts" type="aa{sv}" direction="out"/>
    </method>
    <method name="Graph">
      <arg name="dot" type="s" direction="out"/>
    </method>
    <method name="Stats">
      <arg name="stats" type="a{sv}" direction="out"/>
    </method>
    <!-- Pass traces (docs/devtools.md): from now on the caller receives a
         Trace signal for each pass in which a changed keypath, or a step's
         because, writes or refused writes, matches one of "patterns" (a new
         call replaces them; "**" for every pass). Under a policy it sees
         only keypaths it may read, and only steps with such a keypath.
         Ends with UnsubscribeTrace or when the caller leaves the bus. -->
    <method name="SubscribeTrace">
      <arg name="patterns" type="as" direction="in"/>
    </method>
    <method name="UnsubscribeTrace"/>
    <!-- One notification pass, sent unicast to trace subscribers after the
         pass (after its Notify signals). Each step, in pass order: contract
         (o), name (s), txn (t), outcome (s: called, failed, unchanged,
         unregistered), initial (b), because (as), writes (as), refused (as,
         "KEYPATH: CODE: message"), failure (s, when failed), duration-ns
         (t), truncated (b, only when the keypath lists were left out to
         stay under max-message-bytes). -->
    <signal name="Trace">
      <arg name="txn" type="t"/>
      <arg name="committed" type="b"/>
      <arg name="changed" type="as"/>
      <arg name="steps" type="aa{sv}"/>
      <arg name="duration_ns" type="t"/>
    </signal>
    <!-- Sent unicast to the contract's owner, at most once per contract per
         transaction, in pass order. gdbus-codegen names it
         "contract-notify": GObject's own "notify" signal (property changes)
         would take the plain name, and a handler connected to it would
         never run. -->
    <signal name="Notify">
      <annotation name="org.gtk.GDBus.C.Name" value="ContractNotify"/>
      <arg name="contract" type="o"/>
      <arg name="txn" type="t"/>
      <arg name="changed" type="as"/>
      <arg name="values" type="a{sv}"/>
    </signal>
    <property name="Transaction" type="t" access="read">
      <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="false"/>
    </property>
    <property name="Version" type="s" access="read">
      <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
    </property>
    <!-- The epoch of the bus's history: transaction ids, counters and
         changed-at compare only within one epoch (SPEC 10). -->
    <property name="Epoch" type="s" access="read">
      <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
    </property>
    <!-- The schema the bus enforces (SPEC 14, docs/schema.md) as canonical
         JSON text; empty without one. Changes only when ordod reloads it
         (SIGHUP). -->
    <property name="Schema" type="s" access="read">
      <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="false"/>
    </property>
  </interface>
  <interface name="org.freedesktop.DBus.Introspectable">
    <method name="Introspect">
      <arg name="xml_data" type="s" direction="out"/>
    </method>
  </interface>
  <interface name="org.freedesktop.DBus.Properties">
    <method name="Get">
      <arg name="interface_name" type="s" direction="in"/>
      <arg name="property_name" type="s" direction="in"/>
      <arg name="value" type="v" direction="out"/>
    </method>
    <method name="GetAll">
      <arg name="interface_name" type="s" direction="in"/>
      <arg name="properties" type="a{sv}" direction="out"/>
    </method>
    <method name="Set">
      <arg name="interface_name" type="s" direction="in"/>
      <arg name="property_name" type="s" direction="in"/>
      <arg name="value" type="v" direction="in"/>
    </method>
    <signal name="PropertiesChanged">
      <arg name="interface_name" type="s"/>
      <arg name="changed_properties" type="a{sv}"/>
      <arg name="invalidated_properties" type="as"/>
    </signal>
  </interface>
  <interface name="org.freedesktop.DBus.Peer">
    <method name="Ping"/>
    <method name="GetMachineId">
      <arg name="machine_uuid" type="s" direction="out"/>
    </method>
  </interface>
</node>
"""# + "\n"
