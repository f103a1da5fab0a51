"""Settings as command-line flags: every field of a settings model is a flag (and an
``OVSERVE_<FLAG>`` environment variable) named as OVMS names it, unless marked :data:`NOT_A_FLAG`.

``ovserve.__main__`` builds ``ovserve serve``'s options from :func:`flags`; the schema
(``ovserve.settings.schema``) marks its fields with the constants here, and :func:`lift_flat` moves
a setting given by its flat (flag) name into the sub-model that groups it. The field types every
settings model shares are here too (:data:`ExistingFile`, :data:`ExistingDirectory`).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

# A field marked with this is set by deployment files or by the code, never by a flag.
NOT_A_FLAG: Final[dict[str, Any]] = {"flag": False}
ENV_PREFIX: Final = "OVSERVE_"
# A flag given several times (each value one list item); its environment variable gives one item.
REPEATABLE: Final[dict[str, Any]] = {"repeatable": True}

# Every settings model: unknown names refused, fields reachable by their names and OVMS aliases.
SETTINGS_CONFIG = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)


def _existing_file(path: Path) -> Path:
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    return path


def _existing_directory(path: Path) -> Path:
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory")
    return path


# Paths checked when the settings are read (a model's at its load), not when first used.
ExistingFile = Annotated[Path, AfterValidator(_existing_file)]
ExistingDirectory = Annotated[Path, AfterValidator(_existing_directory)]


def seconds(default: float, flag: str, description: str) -> Any:
    """A timeout setting: a positive number of seconds, held in a field named with its unit
    (``header_timeout_s``) and given as the flag ``flag`` (``--header_timeout``, OVMS's spelling)."""
    return Field(default=default, gt=0, validation_alias=flag, description=description)


def input_names(model: type[BaseModel]) -> set[str]:
    """Every name ``model`` accepts for its fields: the field names and their aliases."""
    names = set(model.model_fields)
    for field in model.model_fields.values():
        names.update(_aliases(field))
    return names


def _aliases(field: FieldInfo) -> tuple[str, ...]:
    alias = field.validation_alias
    if isinstance(alias, str):
        return (alias,)
    if isinstance(alias, AliasChoices):
        return tuple(choice for choice in alias.choices if isinstance(choice, str))
    return ()


@dataclass(frozen=True)
class Flag:
    """One setting as a command-line flag and an environment variable."""

    names: tuple[str, ...]  # the first is the flag's own name; the rest are OVMS spellings
    field_name: str  # the attribute of the settings model that holds the value
    field: FieldInfo

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def repeatable(self) -> bool:
        return self.field.json_schema_extra == REPEATABLE

    @property
    def switch(self) -> bool:
        """A bool: ``--flag`` alone means true; ``--flag false`` (OVMS's spelling) still works."""
        return self.field.annotation is bool

    @property
    def choices(self) -> tuple[str, ...] | None:
        annotation = self.field.annotation
        return typing.get_args(annotation) if typing.get_origin(annotation) is Literal else None


def flags(model: type[BaseModel]) -> list[Flag]:
    """The flags of ``model``'s settings, its sub-models' flattened in (OVMS names them flat)."""
    found = []
    for name, field in model.model_fields.items():
        if field.json_schema_extra == NOT_A_FLAG:
            continue
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            found.extend(flags(field.annotation))
        else:
            found.append(Flag(names=_aliases(field) or (name,), field_name=name, field=field))
    return found


def lift_flat(data: Any, field: str, model: type[BaseModel]) -> Any:
    """Move flat names of ``model``'s settings (as OVMS writes them) into the ``field`` sub-model."""
    if not isinstance(data, dict):
        return data
    names = input_names(model)
    flat = {key: value for key, value in data.items() if key in names}
    if not flat:
        return data
    nested = data.get(field)
    nested = dict(nested) if isinstance(nested, (dict, BaseModel)) else {}
    return {**{key: value for key, value in data.items() if key not in flat}, field: {**nested, **flat}}
