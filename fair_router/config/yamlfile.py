"""Reading a settings file safely: a YAML file is user input, so it is bounded before it is parsed (size, aliases,
duplicate keys, huge integers; docs/hostile-input.md). Every message names the file, line and key, cut short."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import yaml
from pydantic_settings import YamlConfigSettingsSource

from fair_router.config.errors import SHOWN, SettingsError, SettingsWarning, shown

MAX_FILE_BYTES = 1_000_000
"""Largest settings file read (bytes)."""

MAX_INT_DIGITS = 30
"""Longest integer literal taken (digits): every count has a bound far below it."""

class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys and huge integers (with the line of each)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key (a list): SafeLoader's own error names it
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {shown(key)} (first on line {first})", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"integer of {digits} digits (at most {MAX_INT_DIGITS})", node.start_mark)
        return super().construct_yaml_int(node)


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)


def read_settings_file(file: Path) -> dict[str, Any]:
    """The mapping in ``file``; raises SettingsError (bounded message naming the file) when it cannot be used."""
    try:
        with file.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SettingsError(f"{file}: cannot read the settings file: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SettingsError(f"{file}: settings file over {MAX_FILE_BYTES:,} bytes, not read (fair-router settings "
                            "are a few KB)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{file}: not UTF-8 text (byte {exc.start}: {shown(raw[exc.start:exc.start + 4])})") \
            from None
    try:
        for event in yaml.parse(text, Loader=StrictLoader):
            if isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1 if event.start_mark is not None else "?"
                raise SettingsError(f"{file}: line {line}: YAML alias *{str(event.anchor)[:SHOWN]} "
                                    "refused (fair-router settings take no anchors or aliases; write values out)")
        data = yaml.load(text, Loader=StrictLoader)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        kind = "invalid" if isinstance(exc, yaml.constructor.ConstructorError) else "malformed"
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}: line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(file)
        raise SettingsError(f"{where}: {kind} YAML: {str(problem)[:4 * SHOWN]}") from None
    if data is None:
        warnings.warn(SettingsWarning(f"{file}: the settings file is empty; using the defaults (and any "
                                      "FAIR_ROUTER_* variables)"), stacklevel=2)
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{file}: settings must be a YAML mapping of keys to values, got a "
                            f"{type(data).__name__}: {shown(data)}")
    return data


class CheckedYamlSource(YamlConfigSettingsSource):
    """pydantic-settings' YAML source, reading each file with :func:`read_settings_file`."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        return read_settings_file(Path(file_path))
