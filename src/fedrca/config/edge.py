"""The ``edge:`` section: how ``fedrca edge`` reads a plant's tags from its industrial protocols.

One section of the site configuration, validated with the rest at
:func:`fedrca.config.load_config`. It names the connections (``sources``), and for each
plant the address of each of its sensor columns on one of them (``plants``), plus the
sample clock and its bounds. A column's address depends on its source's ``kind``: an
OPC UA node id or browse path (:class:`OpcuaTag`), an MQTT topic, a Sparkplug metric or a
Modbus register (their kinds register in :data:`SOURCE_KINDS` the same way).

.. code-block:: yaml

    edge:
      staleness_seconds: 10         # a value with no news for longer is stale (quality 2)
      sources:
        plc1:
          kind: opcua
          url: opc.tcp://plc1.example:4840
          namespace: urn:example:plant   # namespace URI of node ids / browse paths without one
      plants:
        reactor:
          source: plc1
          tags:
            "XMEAS(7)": "ns=urn:example:plant;s=Reactor.Pressure"   # shorthand: the node id
            "XMEAS(8)": {path: "Objects/Reactor/Level", class: level}
          template: {node: "s=Reactor.{column}"}                  # every column not under tags

Every tag is resolved against its plant's sensors when the configuration loads
(:func:`check_edge`): a column without an address, an address for a column the plant
does not have, an unknown source, a malformed node id, each is a :class:`ConfigError`
naming the key and the fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fedrca.config._base import Strict, key_path, translate
from fedrca.exceptions import ConfigError

__all__ = [
    "SOURCE_KINDS",
    "EdgeSettings",
    "OpcuaSecurity",
    "OpcuaSource",
    "OpcuaTag",
    "PlantTags",
    "ResolvedTag",
    "SourceKind",
    "TagAddress",
    "check_edge",
    "parse_edge",
    "parse_node_id",
    "resolve_tags",
]

_NAME = r"^[A-Za-z][A-Za-z0-9_-]*$"
#: Environment variable names (passwords are only ever read from the environment).
_ENV = r"^[A-Za-z_][A-Za-z0-9_]*$"


class TagAddress(BaseModel):
    """What every tag address has, whatever its protocol.

    ``class`` groups tags for the metrics (``fedrca_edge_*{plant, class}``: e.g. ``flow``,
    ``analyser``, ``valve``; default the source's name), ``scale`` and ``offset`` turn the
    raw value into the column's unit (``value = raw * scale + offset``). ``source`` names the
    connection when it is not the plant's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    #: the field a bare string stands for (``"XMEAS(7)": "ns=2;s=x"`` is ``{node: "ns=2;s=x"}``)
    shorthand: ClassVar[str] = ""

    source: str | None = Field(None, pattern=_NAME)
    tag_class: str | None = Field(None, alias="class", pattern=_NAME, max_length=64)
    scale: float = 1.0
    offset: float = 0.0

    @field_validator("scale", "offset")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    def describe(self) -> str:
        """The address as a user wrote it (for log lines and errors)."""
        return self.model_dump_json(exclude_defaults=True, by_alias=True)


# -- OPC UA -------------------------------------------------------------------------------------

#: ``i=`` numeric, ``s=`` string, ``g=`` GUID, ``b=`` opaque (base64) identifiers of a node id.
_NODE_ID = re.compile(r"^(?:(?:ns=(?P<ns>\d+)|nsu=(?P<nsu>[^;]+));)?(?P<kind>[isgb])=(?P<ident>.+)$", re.DOTALL)
_GUID = re.compile(r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$")


def parse_node_id(text: str) -> tuple[int | None, str | None, str, str]:
    """Split an OPC UA node id string into (namespace index, namespace URI, kind, identifier).

    Accepts the standard forms ``ns=2;s=Tank.Level``, ``nsu=urn:plant;i=1001``, ``i=2258``
    (namespace 0) and ``s=Tank.Level`` (the source's default namespace).

    Examples
    --------
    >>> parse_node_id("nsu=urn:plant;s=Reactor.Pressure")
    (None, 'urn:plant', 's', 'Reactor.Pressure')
    >>> parse_node_id("ns=2;i=1001")
    (2, None, 'i', '1001')

    Raises
    ------
    ValueError
        When the text is not a node id (the message shows the forms).
    """
    match = _NODE_ID.match(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not an OPC UA node id; write ns=<index>;s=<name>, nsu=<namespace URI>;s=<name>, "
            "i=<number> or s=<name>"
        )
    ns = None if match["ns"] is None else int(match["ns"])
    kind, ident = match["kind"], match["ident"]
    if kind == "i" and not (ident.isdigit() and int(ident) < 2**32):
        raise ValueError(f"{text!r}: a numeric identifier (i=) is an integer in 0..{2**32 - 1}")
    if kind == "g" and not _GUID.match(ident):
        raise ValueError(f"{text!r}: a GUID identifier (g=) looks like 09087e75-8e5e-499b-954f-f2a9603db28a")
    if ns is not None and ns > 65535:
        raise ValueError(f"{text!r}: a namespace index is in 0..65535")
    return ns, match["nsu"], kind, ident


class OpcuaTag(TagAddress):
    """A column on an OPC UA server: a ``node`` id, or a browse ``path`` from the Objects folder.

    ``node``: ``nsu=<URI>;s=<name>`` (recommended: the namespace index of a URI may change when
    the server restarts; the edge resolves it at every connection), ``ns=<index>;s=<name>``,
    ``i=<number>`` or ``s=<name>`` (in the source's ``namespace``). ``path``: browse names
    separated by ``/`` below the Objects folder, each in the source's ``namespace`` unless
    written ``<URI>|<name>`` (e.g. ``Reactor/Pressure`` or ``urn:plant|Reactor/urn:plant|PT101``).
    """

    shorthand: ClassVar[str] = "node"

    node: str | None = Field(None, min_length=1, max_length=4096)
    path: str | None = Field(None, min_length=1, max_length=4096)

    @field_validator("node")
    @classmethod
    def _node_id(cls, value: str | None) -> str | None:
        if value is not None:
            parse_node_id(value)
        return value

    @model_validator(mode="after")
    def _node_or_path(self) -> OpcuaTag:
        if (self.node is None) == (self.path is None):
            raise ValueError("give exactly one of node: 'nsu=urn:plant;s=Tank.Level' or path: 'Objects/Tank/Level'")
        if self.path is not None:
            parts = self.path.strip("/").split("/")
            if parts and parts[0] == "Objects":
                parts = parts[1:]
            if not parts or any(not p.rpartition("|")[2] for p in parts):
                raise ValueError(f"path {self.path!r} has an empty browse name; write e.g. 'Reactor/Pressure'")
        return self


class OpcuaSecurity(Strict):
    """Secure channel of an OPC UA connection: ``policy`` + ``mode`` and the client's certificate.

    ``certificate`` / ``private_key``: the client application's certificate (DER or PEM) and
    key; ``server_certificate``: the server's, to trust it (default: the one it presents).
    """

    policy: Literal["Basic256Sha256", "Aes128Sha256RsaOaep", "Aes256Sha256RsaPss"] = "Basic256Sha256"
    mode: Literal["Sign", "SignAndEncrypt"] = "SignAndEncrypt"
    certificate: str = Field(..., min_length=1)
    private_key: str = Field(..., min_length=1)
    server_certificate: str | None = None


class OpcuaSource(Strict):
    """One OPC UA server connection (asyncua client, one subscription).

    Times are in seconds. ``publishing_interval``: how often the server sends changes;
    ``sampling_interval``: how often it samples each tag (0 = as fast as it can);
    ``queue_size``: changes a monitored item keeps between two publishes (so a change and
    its return within one interval are both seen); ``timestamps``: which time orders a
    tag's values (``source``: the device's, ``server``: the server's, ``receive``: the
    edge's clock when it arrives; only that timestamp is asked of the server, and a value
    without it, or stamped later than it arrived, counts from its arrival). ``username`` with
    the password from the environment variable ``password_env`` (never from the file), or
    ``user_certificate`` + ``user_private_key``.
    ``watchdog_interval``: how often the session's health is probed; a session or
    subscription silent for ``watchdog_interval`` x 3 is torn down and created again.
    """

    kind: Literal["opcua"]
    url: str = Field(..., pattern=r"^opc\.tcp://[^/\s]+(:\d+)?(/\S*)?$", max_length=2048)
    namespace: str | None = Field(None, min_length=1, description="default namespace URI of node ids and paths")
    publishing_interval: float = Field(0.1, gt=0.0, le=3600.0)
    sampling_interval: float = Field(0.0, ge=0.0, le=3600.0)
    queue_size: int = Field(10, ge=1, le=10_000)
    timestamps: Literal["source", "server", "receive"] = "source"
    security: OpcuaSecurity | None = None
    username: str | None = Field(None, min_length=1)
    password_env: str = Field("FEDRCA_OPCUA_PASSWORD", pattern=_ENV)
    user_certificate: str | None = None
    user_private_key: str | None = None
    watchdog_interval: float = Field(1.0, gt=0.0, le=600.0)
    request_timeout: float = Field(4.0, gt=0.0, le=600.0)
    reconnect_max_delay: float = Field(5.0, gt=0.0, le=3600.0)

    tag_model: ClassVar[type[TagAddress]] = OpcuaTag

    @model_validator(mode="after")
    def _identity(self) -> OpcuaSource:
        if (self.user_certificate is None) != (self.user_private_key is None):
            raise ValueError("give both user_certificate and user_private_key (an X.509 user identity), or neither")
        if self.username is not None and self.user_certificate is not None:
            raise ValueError("give a username or a user certificate, not both")
        return self


#: The source kinds and their settings models. A protocol adds its class here (``kind`` its
#: discriminator, ``tag_model`` the class of its tag addresses).
SOURCE_KINDS: dict[str, type[Strict]] = {"opcua": OpcuaSource}
SourceKind = OpcuaSource


class PlantTags(Strict):
    """The tag map of one plant: its default ``source``, explicit ``tags`` and a ``template``.

    ``tags``: column -> address (a mapping of the source kind's keys, or a bare string for its
    shorthand field). ``template``: the address of every column not under ``tags``, its
    strings formatted with ``{site}``, ``{plant}``, ``{column}`` and ``{index}`` (the column's
    0-based position in the plant's sensors).
    """

    source: str | None = Field(None, pattern=_NAME)
    tags: dict[str, str | dict[str, Any]] = Field(default_factory=dict)
    template: str | dict[str, Any] | None = None


class EdgeSettings(Strict):
    """The ``edge:`` section (see the module docstring; every time in seconds).

    ``sample_seconds``: the rows' clock (default the dataset's); ``staleness_seconds``: a
    value without news (an update, or its connection vouching for it) for longer is stale;
    ``grace_seconds``: how long a sample waits for late updates before its row is closed;
    ``buffer_seconds``: how much plant time of rows is kept while the broker is away (then the
    oldest rows are dropped, counted and logged); ``anchor``: the time of ``seq`` 0 (seconds
    since the epoch; seq = (row time - anchor) / sample_seconds); ``groups``: named sets of
    plants one ``fedrca edge --group NAME`` process serves (default: one group per plant).
    """

    sample_seconds: float | None = Field(None, gt=0.0, le=86_400.0)
    staleness_seconds: float | None = Field(None, gt=0.0, le=7 * 86_400.0)
    grace_seconds: float = Field(0.25, ge=0.0, le=3600.0)
    buffer_seconds: float = Field(3600.0, gt=0.0, le=7 * 86_400.0)
    anchor: float = Field(0.0, ge=0.0)
    sources: dict[str, Any] = Field(default_factory=dict)
    plants: dict[str, PlantTags] = Field(default_factory=dict)
    groups: dict[str, list[str]] = Field(default_factory=dict)
    metrics_port: int = Field(9465, ge=0, le=65_535)

    @field_validator("sources", mode="after")
    @classmethod
    def _sources(cls, value: dict[str, Any]) -> dict[str, Any]:
        # parse_edge validates each source with its kind's model (and names the key of an error);
        # this check guards a section built in code
        for name, settings in value.items():
            if not re.match(_NAME, name):
                raise ValueError(f"source name {name!r} must start with a letter and hold letters, digits, _ or -")
            if not isinstance(settings, tuple(SOURCE_KINDS.values())):
                raise ValueError(f"source '{name}' is not parsed; kinds are {', '.join(SOURCE_KINDS)}")
        return value

    def source_of(self, name: str) -> Any:
        """The settings of source ``name``."""
        return self.sources[name]

    def group(self, name: str) -> list[str]:
        """The plants of group ``name`` (a plant's own name is the group of that plant alone)."""
        if name in self.groups:
            return list(self.groups[name])
        if name in self.plants:
            return [name]
        raise ConfigError(
            f"no edge group or plant '{name}'; groups are {', '.join(self.groups) or '(none)'}, "
            f"plants are {', '.join(self.plants)}",
            key="edge.groups",
        )

    def group_names(self) -> list[str]:
        """Every group one edge process serves: the configured groups, else one per plant."""
        return list(self.groups) if self.groups else list(self.plants)


@dataclass(frozen=True)
class ResolvedTag:
    """One column's address, resolved: plant, column (its position), source name and address."""

    plant: str
    column: int
    name: str
    source: str
    address: TagAddress

    @property
    def tag_class(self) -> str:
        """The metrics class of the tag (its ``class``, else its source's name)."""
        return self.address.tag_class or self.source


_PLACEHOLDER = re.compile(r"\{(site|plant|column|index)\}")


def _format(value: Any, names: Mapping[str, Any]) -> Any:
    """The template with ``{site}``, ``{plant}``, ``{column}``, ``{index}`` filled in (other braces stay)."""
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: str(names[m.group(1)]), value)
    if isinstance(value, dict):
        return {k: _format(v, names) for k, v in value.items()}
    return value


def _address(raw: Any, model: type[TagAddress], key: str, source: str | None) -> TagAddress:
    data = {model.shorthand: raw} if isinstance(raw, str) else raw
    if not isinstance(data, dict):
        raise ConfigError(f"a tag is a mapping of {', '.join(model.model_fields)} or a string", source=source, key=key)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise translate(exc, model, source=source, prefix=(key,)) from None


def resolve_tags(
    edge: EdgeSettings, plant: str, sensors: Sequence[str], site: str, source: str | None = None
) -> list[ResolvedTag]:
    """The addresses of ``plant``'s sensor columns, in column order.

    Raises
    ------
    ConfigError
        For a column without an address, a tag for a column the plant does not have, an
        unknown source or an address its source's kind does not accept.
    """
    base = f"edge.plants.{plant}"
    spec = edge.plants.get(plant)
    if spec is None:
        raise ConfigError(
            f"plant '{plant}' has no tag map; add edge.plants.{plant}.tags (or a template)", source=source, key=base
        )
    unknown = [c for c in spec.tags if c not in sensors]
    if unknown:
        raise ConfigError(
            f"column '{unknown[0]}' is not a sensor of plant '{plant}'; its sensors are {', '.join(sensors)}",
            source=source,
            key=f"{base}.tags",
        )
    out: list[ResolvedTag] = []
    for index, column in enumerate(sensors):
        if column in spec.tags:
            raw, key = spec.tags[column], key_path([base, "tags", column])
        elif spec.template is not None:
            raw, key = (
                _format(spec.template, {"site": site, "plant": plant, "column": column, "index": index}),
                (f"{base}.template"),
            )
        else:
            raise ConfigError(
                f"column '{column}' of plant '{plant}' has no address; add it under tags or give a template",
                source=source,
                key=f"{base}.tags",
            )
        named = raw.get("source") if isinstance(raw, dict) else None
        source_name = named or spec.source
        if source_name is None:
            if len(edge.sources) != 1:
                raise ConfigError(
                    f"plant '{plant}' names no source and the edge has {len(edge.sources)}; set "
                    f"edge.plants.{plant}.source to one of {', '.join(edge.sources) or '(none: add edge.sources)'}",
                    source=source,
                    key=f"{base}.source",
                )
            source_name = next(iter(edge.sources))
        if source_name not in edge.sources:
            raise ConfigError(
                f"unknown source '{source_name}'; sources are {', '.join(edge.sources) or '(none)'}",
                source=source,
                key=key if named else f"{base}.source",
            )
        model = edge.sources[source_name].tag_model
        out.append(ResolvedTag(plant, index, column, source_name, _address(raw, model, key, source)))
    return out


def parse_edge(data: Any, source: str | None = None) -> EdgeSettings:
    """Validate the ``edge:`` section: each source with its kind's model, then the rest.

    Raises
    ------
    ConfigError
        Naming ``edge.<key>`` (``edge.sources.plc1.url``) and what would be valid.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("must be a mapping of sources, plants and the clock's settings", source=source, key="edge")
    sources = data.get("sources") or {}
    if not isinstance(sources, dict):
        raise ConfigError("must be a mapping of source name -> settings", source=source, key="edge.sources")
    parsed: dict[str, Any] = {}
    for name, raw in sources.items():
        key = f"edge.sources.{name}"
        if not isinstance(name, str) or not re.match(_NAME, name):
            raise ConfigError("a source name starts with a letter (letters, digits, _ or -)", source=source, key=key)
        kind = raw.get("kind") if isinstance(raw, dict) else None
        if kind not in SOURCE_KINDS:
            raise ConfigError(f"kind must be one of {', '.join(SOURCE_KINDS)}, got {kind!r}", source=source,
                              key=f"{key}.kind")  # fmt: skip
        model = SOURCE_KINDS[kind]
        try:
            parsed[name] = model.model_validate(raw)
        except ValidationError as exc:
            raise translate(exc, model, source=source, prefix=("edge", "sources", name)) from None
    try:
        return EdgeSettings.model_validate({**data, "sources": parsed})
    except ValidationError as exc:
        raise translate(exc, EdgeSettings, source=source, prefix=("edge",)) from None


def check_edge(edge: EdgeSettings, plants: Mapping[str, Sequence[str] | None], site: str, source: str | None) -> None:
    """Validate the ``edge:`` section against the site's plants (every tag resolves).

    ``plants``: plant -> its sensor columns (None while a ``match`` rule is not resolved
    against a file: its tags are then resolved when ``fedrca edge`` starts).

    Raises
    ------
    ConfigError
        Naming the key (``edge.plants.reactor.tags.XMEAS(7)``) and the fix.
    """
    for plant in edge.plants:
        if plant not in plants:
            raise ConfigError(
                f"unknown plant '{plant}'; plants are {', '.join(plants)}", source=source, key=f"edge.plants.{plant}"
            )
        sensors = plants[plant]
        if sensors is not None:
            resolve_tags(edge, plant, sensors, site, source)
    owner: dict[str, str] = {}
    for group, members in edge.groups.items():
        if not re.match(_NAME, group):
            raise ConfigError("a group name starts with a letter (letters, digits, _ or -)", source=source,
                              key=f"edge.groups.{group}")  # fmt: skip
        if not members:
            raise ConfigError("a group lists at least one plant", source=source, key=f"edge.groups.{group}")
        for plant in members:
            if plant not in edge.plants:
                raise ConfigError(
                    f"plant '{plant}' has no tag map under edge.plants (plants with one: {', '.join(edge.plants)})",
                    source=source,
                    key=f"edge.groups.{group}",
                )
            if plant in owner:
                raise ConfigError(
                    f"plant '{plant}' is in groups '{owner[plant]}' and '{group}'; one edge process serves a plant",
                    source=source,
                    key=f"edge.groups.{group}",
                )
            owner[plant] = group


# the MQTT, Sparkplug B and Modbus TCP models live beside this module (they build on TagAddress)
from fedrca.config.edge_protocols import ModbusSource, MqttSource, SparkplugSource  # noqa: E402

SOURCE_KINDS.update(mqtt=MqttSource, sparkplug=SparkplugSource, modbus=ModbusSource)
