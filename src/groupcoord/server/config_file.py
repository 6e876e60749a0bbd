"""`groupcoord serve --config FILE`: the serve options read from a properties file (Kafka's
server.properties syntax, groupcoord/properties.py), and the configuration reference
(docs/config.md, `groupcoord serve --print-config-reference`) generated from the same parser.

The serve parser (main.py add_serve_parser, with security_args.py and web.py) is the one place
where settings are defined; everything here is derived from its actions:

  keys        an option's key is its flag without the dashes, with dots (--max-connections:
              max.connections). ALIASES adds other names for the same setting: Kafka's
              (listeners, super.users, ...) and librdkafka's (ssl.ca.location, ...). The
              group settings --group-config takes are keys of their own
              (group.consumer.session.timeout.ms=45000).
  values      checked and converted by the option's own argparse type and choices; a flag
              without a value (--allow-create-topics) takes true or false; a repeatable option
              a list, comma-separated (super.users semicolon-separated, as Kafka's: a
              certificate's principal holds commas). Blanks around a value are dropped (as
              Kafka does); an empty value leaves the option unset.
  flags win   the command line is parsed as always, then every option it did not give takes
              the file's value. A repeatable option given on the command line replaces the
              file's list, except --group-config, which adds to the file's group settings (a
              setting given in both: the command line's). --store and --data-dir are one
              setting: either on the command line drops both from the file.
  errors      an unknown key (the message lists the known ones), a bad value, two names of one
              option, a key Kafka has that cannot mean the same here (REFUSED), a file that
              cannot be read: one `FILE:LINE: ...` line and exit status 2, as a bad flag.

With --processes the supervisor hands its nodes the merged options as flags (processes.py
child_argv; --config itself has no default, so it is not passed on).
"""
from __future__ import annotations

import argparse
import difflib
import sys

from groupcoord.properties import PropertiesError, iter_properties

__all__ = ["add_config_args", "read_config", "reference_markdown", "ConfigError", "ALIASES",
           "REFUSED", "option_keys"]

CONFIG_DEST = "config"
REFERENCE_DEST = "print_config_reference"
GROUP_DEST = "group_config"

# Other names for an option's setting: dest -> ((key, where the name comes from), ...).
ALIASES = {
    "listener": (("listeners", "Kafka"),),
    "data_dir": (("log.dirs", "Kafka; one directory only"), ("log.dir", "Kafka")),
    "max_frame_bytes": (("socket.request.max.bytes", "Kafka"),),
    "allow_delete_topics": (("delete.topic.enable", "Kafka; default false here"),),
    "ssl_certfile": (("ssl.keystore.location", "Kafka; with ssl.keystore.type=PEM"),
                     ("ssl.certificate.location", "librdkafka")),
    "ssl_keyfile": (("ssl.key.location", "librdkafka"),),
    "ssl_cafile": (("ssl.truststore.location", "Kafka; with ssl.truststore.type=PEM"),
                   ("ssl.ca.location", "librdkafka")),
    "sasl_mechanism": (("sasl.enabled.mechanisms", "Kafka"),),
    "super_user": (("super.users", "Kafka"),),
    "allow_if_no_acl": (("allow.everyone.if.no.acl.found", "Kafka"),),
    "failed_authentication_delay_ms": (("connection.failed.authentication.delay.ms",
                                        "Kafka"),),
}
# Options whose own key is Kafka's name for the same setting (shown in the reference).
KAFKA_SAME = frozenset(("max.connections", "connections.max.idle.ms",
                        "connections.max.reauth.ms", "queued.max.request.bytes", "node.id",
                        "ssl.client.auth"))
# Java key and trust stores: read only when PEM (Kafka's default type is JKS): the location
# key needs its type key set to PEM in the same file.
PEM_STORES = {"ssl.keystore.location": "ssl.keystore.type",
              "ssl.truststore.location": "ssl.truststore.type"}
SEPARATORS = {"super_user": ";"}        # a repeatable option's list separator; default ","
REFUSED = {
    "advertised.listeners": "one advertised host for every listener: advertised.host (each "
                            "listener's port is its own)",
    "listener.security.protocol.map": "a listener's name is its security protocol "
                                      "(listeners=SASL_SSL://HOST:PORT)",
    "ssl.keystore.password": "the keystore is a PEM file (ssl.keystore.type=PEM) read without "
                             "a password",
    "ssl.key.password": "encrypted private keys are not read: decrypt the key file (openssl "
                        "pkey -in enc.pem -out key.pem) and protect it by its file mode",
}
SAME_SETTING = (frozenset(("store", "data_dir")),)
_SKIP = frozenset(("help", CONFIG_DEST, REFERENCE_DEST))


class ConfigError(Exception):
    """A config file that cannot be used; the message starts with FILE:LINE (or FILE)."""


# ============================================================================ the options
class _ConfigAction(argparse.Action):
    """--config FILE: keeps the path; carries the group settings' (name, default) for the
    reading and the reference."""

    def __init__(self, option_strings, dest, group_settings=(), **kw):
        super().__init__(option_strings, dest, **kw)
        self.group_settings = tuple(group_settings)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


class _ReferenceAction(argparse.Action):
    """--print-config-reference: docs/config.md to stdout, exit 0 (as --help does)."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(reference_markdown(parser))
        sys.stdout.flush()
        parser.exit(0)


def add_config_args(parser: argparse.ArgumentParser, group_settings) -> None:
    """Add --config and --print-config-reference to the serve parser, and read the file when
    it parses: group_settings = [(Kafka name, default), ...] of --group-config."""
    parser.add_argument(
        "--config", action=_ConfigAction, group_settings=group_settings,
        default=argparse.SUPPRESS, metavar="FILE",
        help="read options from FILE, a properties file (Kafka's server.properties syntax): "
             "each key is an option without its dashes, with dots (max.connections=1000), or "
             "Kafka's name for it (listeners=PLAINTEXT://0.0.0.0:9092); group settings by "
             "their names (group.consumer.session.timeout.ms=45000); repeatable options take "
             "comma-separated lists. Options on the command line win. docs/config.md lists "
             "every key")
    parser.add_argument(
        "--print-config-reference", action=_ReferenceAction, default=argparse.SUPPRESS,
        help="print the configuration reference (every option, its keys in a --config file, "
             "type and default: docs/config.md) as Markdown and exit")
    plain = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        ns, rest = plain(args, namespace)
        path = getattr(ns, CONFIG_DEST, None)
        if path is None:
            return ns, rest
        try:
            values = read_config(path, parser)
        except ConfigError as e:
            parser.error(str(e))
        _merge(ns, values, _given(plain, args, parser))
        return ns, rest

    # The subparsers action and parse_args both call this method: the file is read wherever
    # the serve parser is used.
    parser.parse_known_args = parse_known_args


def _options(parser) -> list:
    """The parser's actions a file may set, in the parser's order."""
    return [a for a in parser._actions
            if a.option_strings and a.dest not in _SKIP and a.help != argparse.SUPPRESS]


def _own_key(action) -> str:
    return max(action.option_strings, key=len).lstrip("-").replace("-", ".")


def option_keys(action) -> list:
    """An option's keys in a config file: its own first, then its ALIASES."""
    if action.dest == GROUP_DEST or action.dest in _SKIP:
        return []
    return [_own_key(action)] + [k for k, _why in ALIASES.get(action.dest, ())]


def _group_settings(parser) -> tuple:
    for a in parser._actions:
        if isinstance(a, _ConfigAction):
            return a.group_settings
    return ()


def _key_table(parser) -> dict:
    """key -> ("option", action) | ("group", default) | ("store-type", None)."""
    table = {}
    for a in _options(parser):
        for k in option_keys(a):
            table[k] = ("option", a)
    for name, default in _group_settings(parser):
        table[name] = ("group", default)
    for type_key in PEM_STORES.values():
        table[type_key] = ("store-type", None)
    return table


# ============================================================================ reading
def read_config(path: str, parser: argparse.ArgumentParser) -> dict:
    """FILE -> {dest: value} of the options it sets, converted as argparse converts a flag's
    value (group settings: group_config, a list of NAME=VALUE). ConfigError otherwise."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError("%s: cannot read it: %s" % (path, e.strerror or e)) from None
    except UnicodeDecodeError as e:
        raise ConfigError("%s: not UTF-8 text (%s)" % (path, e.reason)) from None
    try:
        entries = list(iter_properties(text))
    except PropertiesError as e:
        raise ConfigError("%s:%d: %s" % (path, e.lineno, e.reason)) from None
    table = _key_table(parser)
    values: dict = {}
    by: dict = {}               # dest (or SAME_SETTING) -> (key, line) that set it
    groups: dict = {}           # group setting -> "NAME=VALUE" (the last one given)
    store_types: dict = {}      # ssl.keystore.type ... -> (value, line)
    stores: list = []           # (location key, line)
    for line, key, raw in entries:
        where = "%s:%d" % (path, line)
        value = raw.strip()
        if key in REFUSED:
            raise ConfigError("%s: %s is not supported: %s" % (where, key, REFUSED[key]))
        kind, what = table.get(key, (None, None))
        if kind is None:
            close = difflib.get_close_matches(key, table, n=1)
            raise ConfigError("%s: unknown key %r%s; the keys are: %s"
                              % (where, key, " (did you mean %s?)" % close[0] if close else "",
                                 ", ".join(sorted(table))))
        if kind == "store-type":
            if value.upper() != "PEM":
                raise ConfigError("%s: %s=%s: only PEM files are read (convert a JKS or "
                                  "PKCS12 store with keytool / openssl)" % (where, key, value))
            store_types[key] = line
            continue
        if kind == "group":
            groups.pop(key, None)       # keep file order by the last occurrence
            if value:
                groups[key] = "%s=%s" % (key, _group_value(key, value, what, where))
            continue
        action = what
        slot = next((s for s in SAME_SETTING if action.dest in s), action.dest)
        earlier = by.get(slot)
        if earlier is not None and earlier[0] != key:
            raise ConfigError("%s: %s and %s (line %d) are one setting: give one"
                              % (where, key, earlier[0], earlier[1]))
        by[slot] = (key, line)
        if key in PEM_STORES:
            stores.append((key, line))
        if not value:                   # empty: unset (the default, or an earlier line's)
            values.pop(action.dest, None)
            continue
        converted = _convert(parser, action, key, value, where)
        if key in ("log.dirs", "log.dir") and len(converted.split(",")) > 1:
            raise ConfigError("%s: %s=%s: groupcoord keeps its shards in one directory: give "
                              "one" % (where, key, value))
        values[action.dest] = converted
    for key, line in stores:
        if PEM_STORES[key] not in store_types:
            raise ConfigError("%s:%d: %s is read only as a PEM file: add %s=PEM (a JKS or "
                              "PKCS12 store is not read; or give ssl.certificate.location / "
                              "ssl.ca.location)" % (path, line, key, PEM_STORES[key]))
    if groups:
        values[GROUP_DEST] = list(groups.values())
    return values


def _convert(parser, action, key: str, value: str, where: str):
    """A file's value of an option, checked as argparse checks the flag's."""
    try:
        if action.nargs == 0:           # a flag without a value (store_true)
            return action.const if _boolean(action, value) else action.default
        if isinstance(action, argparse._AppendAction):
            sep = SEPARATORS.get(action.dest, ",")
            return [_one(parser, action, v.strip()) for v in value.split(sep) if v.strip()]
        return _one(parser, action, value)
    except argparse.ArgumentError as e:
        raise ConfigError("%s: %s=%s: %s" % (where, key, value, e)) from None


def _one(parser, action, text: str):
    # argparse's own conversion and choices check (the messages a bad flag gets).
    v = parser._get_value(action, text)
    parser._check_value(action, v)
    return v


def _boolean(action, text: str) -> bool:
    t = text.lower()
    if t in ("true", "false"):          # Kafka's booleans: true or false, any case
        return t == "true"
    raise argparse.ArgumentError(action, "expected true or false, not %r" % text)


def _group_value(key: str, value: str, default, where: str) -> str:
    # The type check of a group setting (its range is checked with the others', main.py).
    if isinstance(default, tuple):
        return ",".join(x.strip() for x in value.split(",") if x.strip())
    try:
        int(value)
    except ValueError:
        raise ConfigError("%s: %s=%s: not an integer" % (where, key, value)) from None
    return value


# ============================================================================ merging
_UNSET = object()


def _given(plain, args: list, parser) -> set:
    """The dests the command line gives: parsed again with a mark in each, the ones whose
    mark was replaced (an append copies its list, so a list mark is checked by identity)."""
    marks = {a.dest: ([] if isinstance(a, argparse._AppendAction) else _UNSET)
             for a in parser._actions if a.option_strings and a.dest != argparse.SUPPRESS}
    probe, _rest = plain(args, argparse.Namespace(**marks))
    return {d for d, m in marks.items() if getattr(probe, d, m) is not m}


def _merge(ns, values: dict, given: set) -> None:
    for dest, value in values.items():
        if dest == GROUP_DEST:
            # The command line's NAME=VALUE after the file's: parse_group_config keeps the last.
            setattr(ns, dest, list(value) + list(getattr(ns, dest, [])))
            continue
        same = next((s for s in SAME_SETTING if dest in s), frozenset((dest,)))
        if same & given:
            continue
        setattr(ns, dest, value)


# ============================================================================ the reference
REGENERATE = "PYTHONPATH=src python -m groupcoord.cli serve --print-config-reference " \
             "> docs/config.md"


def reference_markdown(parser: argparse.ArgumentParser) -> str:
    """docs/config.md: every serve option with its config keys, type, default and help, then
    the group settings and the Kafka keys refused."""
    out = [
        "# Configuration reference: `groupcoord serve`",
        "",
        "<!-- Generated from the serve parser (src/groupcoord/server/main.py add_serve_parser, "
        "server/security_args.py, server/web.py) by server/config_file.py; do not edit. "
        "Regenerate: %s (tests/test_config_file.py checks it is current). -->" % REGENERATE,
        "",
        "Every setting is a flag of `groupcoord serve` and a key of the file "
        "`groupcoord serve --config FILE` reads: Kafka's server.properties syntax (`key=value`, "
        "`key: value` or `key value`; # and ! start comments; a line ending in a backslash "
        "continues on the next; backslash escapes). A key is the flag without its dashes, with "
        "dots; where Kafka (or librdkafka) has its own name for the same setting, that name "
        "works too. The group settings --group-config takes are keys of their own.",
        "",
        "- Options given on the command line win over the file. A repeatable option given "
        "on the command line replaces the file's list; --group-config adds to the file's "
        "group settings (one given in both: the command line's). --store and --data-dir are "
        "one setting: either on the command line drops both from the file.",
        "- A repeatable option takes a comma-separated list (super.users: semicolon-separated, "
        "as in Kafka). A flag without a value takes true or false. Blanks around a value are "
        "dropped; an empty value leaves the option unset. A key given twice: the last line.",
        "- Relative paths are relative to the working directory (as on the command line), "
        "not to the file.",
        "- An unknown key, a bad value, two names of one option in one file: one line "
        "FILE:LINE: what is wrong, and exit status 2.",
        "",
        "deploy/server.properties is an example; docs/operations.md, \"Deployment\", runs it "
        "under systemd and in a container.",
        "",
    ]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if a.option_strings and a.dest != "help" and a.help != argparse.SUPPRESS]
        if not actions:
            continue
        title = "Options" if group is parser._optionals else group.title.capitalize()
        out += ["## %s" % title, ""]
        if group.description and group is not parser._optionals:
            out += [group.description, ""]
        for a in actions:
            out += _option_section(parser, a)
    out += _group_section(parser)
    out += ["## Kafka keys refused", "",
            "Kafka settings with no equivalent here are unknown keys. These name something "
            "groupcoord does differently, so a file giving them is refused with the reason:",
            ""]
    for key in sorted(REFUSED):
        out.append("- %s: %s." % (key, REFUSED[key]))
    out.append("")
    return "\n".join(out)


def _option_section(parser, a) -> list:
    flag = max(a.option_strings, key=len)
    head = flag if a.nargs == 0 else "%s %s" % (flag, a.metavar or a.dest.upper())
    lines = ["### %s" % head, ""]
    if a.dest in (CONFIG_DEST, REFERENCE_DEST):
        keys = "none (command line only)"
    elif a.dest == GROUP_DEST:
        keys = "each group setting is a key of its own (Group settings, below)"
    else:
        own = _own_key(a)
        keys = own + (" (Kafka's name too)" if own in KAFKA_SAME else "")
        keys += "".join(", %s (%s)" % (k, why) for k, why in ALIASES.get(a.dest, ()))
    lines += ["- keys: %s" % keys,
              "- type: %s" % ("none (prints and exits)" if a.dest == REFERENCE_DEST
                              else _type_text(a)),
              "- default: %s" % _default_text(a),
              "",
              _help_text(parser, a),
              ""]
    return lines


def _type_text(a) -> str:
    if a.dest == GROUP_DEST:
        return "NAME=VALUE; repeat the flag"
    if a.nargs == 0:
        return "boolean (true or false in a file; on the command line the flag alone)"
    if isinstance(a, argparse._AppendAction):
        sep = SEPARATORS.get(a.dest, ",")
        return "list, %s-separated in a file; repeat the flag on the command line" % (
            "semicolon" if sep == ";" else "comma")
    if a.choices is not None:
        return "one of " + ", ".join(str(c) for c in a.choices)
    if a.type is int:
        return "integer"
    if a.type is not None and _is_boolean(a.type):
        return "boolean (true or false)"
    return "string"


def _is_boolean(t) -> bool:
    try:
        return t("true") is True and t("false") is False
    except Exception:
        return False


def _default_text(a) -> str:
    d = a.default
    if d is None or d == [] or d == argparse.SUPPRESS:
        return "not set"
    if isinstance(d, bool):
        return "true" if d else "false"
    return str(d)


def _help_text(parser, a) -> str:
    # As argparse's HelpFormatter expands %(default)s and friends.
    params = {k: v for k, v in vars(a).items() if v is not argparse.SUPPRESS}
    params["prog"] = "groupcoord serve"
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in params["choices"])
    text = (a.help or "") % params
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _group_section(parser) -> list:
    settings = _group_settings(parser)
    if not settings:
        return []
    out = ["## Group settings", "",
           "Kafka's broker settings of groups and offsets, by Kafka's names (with this "
           "project's own in Kafka's style): keys of a --config file, or --group-config "
           "NAME=VALUE on the command line. Times in milliseconds unless the name says "
           "otherwise; a list is comma-separated.", "",
           "| key | type | default |", "|---|---|---|"]
    for name, default in settings:
        kind = "list" if isinstance(default, tuple) else "integer"
        shown = ",".join(default) if isinstance(default, tuple) else str(default)
        out.append("| %s | %s | %s |" % (name, kind, shown))
    out.append("")
    return out

