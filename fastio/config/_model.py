"""The config's model, generated from :mod:`fastio.spec`: a pydantic section per
settings class, with the knobs a file may hold (``in_config``), their
defaults, optionality and docs, and nothing else.

A value is checked by :func:`fastio.spec.check_value` (a keyword argument's
message and size parsing); then each section makes its settings class and the
whole config its :class:`~fastio.spec.DatasetSpec`, so the spec's checks
across knobs (rank with world_size, tiering with the cache) run as well. Sizes
are written out as ``"64MiB"`` where exact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from fastio.spec import DatasetSpec, check_value, knobs, size_text

if TYPE_CHECKING:
    from typing_extensions import Self

    from fastio.dataset._dataset import Dataset
    from fastio.spec import Knob

__all__ = ["DatasetConfig", "Section", "defaults", "plain", "section_model", "sections"]


class Section(BaseModel):
    """A config section: the knobs of :attr:`settings` that a file may hold.

    Each value is checked alone, then all together by making the settings:
    a section that validates is one the spec accepts.
    """

    # Infinite values (a timeout that never fires) stay floats as files hold
    # them: YAML's .inf, TOML's inf, JSON's Infinity (not null, which loads
    # back as "unset").
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")
    settings: ClassVar[type[Any]]

    @model_validator(mode="after")
    def _settings_hold(self) -> Self:
        try:
            self.to_settings()
        except TypeError as error:  # pydantic reports ValueErrors only
            raise ValueError(str(error)) from None
        return self

    def to_settings(self) -> Any:
        """The :attr:`settings` this section holds; knobs kept out of files
        (a callback) are at their defaults."""
        values = {name: _settings_of(getattr(self, name)) for name in type(self).model_fields}
        return self.settings(**values)


def _settings_of(value: Any) -> Any:
    if isinstance(value, Section):
        return value.to_settings()
    if isinstance(value, tuple) and value and isinstance(value[0], Section):
        return tuple(_settings_of(one) for one in value)
    return value


class ConfigBase(Section):
    """A dataset and every knob fastio has: what a config file holds.

    Build it with :func:`fastio.load_config` (or from plain data, or
    :meth:`from_spec`); :meth:`to_spec` gives the
    :class:`~fastio.spec.DatasetSpec`, :meth:`to_dataset` the
    :class:`fastio.Dataset`, :func:`fastio.save_config` writes it out. Frozen:
    change it with explicit arguments to :func:`fastio.load_config`.
    """

    if TYPE_CHECKING:
        # The fields are made from DatasetSpec's knobs at import; typed code
        # reads them through to_spec().
        def __getattr__(self, name: str) -> Any: ...

    @field_validator("format", check_fields=False)
    @classmethod
    def _known_format(cls, name: str | None) -> str | None:
        from fastio.formats._shards import FORMATS

        if name is not None and name not in FORMATS:
            raise ValueError(f"must be one of {', '.join(sorted(FORMATS))}, not {name!r}")
        return name

    @field_validator("format_options", check_fields=False)
    @classmethod
    def _options_fit_format(cls, options: Section, info: ValidationInfo) -> Section:
        from fastio.formats._shards import format_for_url, format_options

        name = info.data.get("format")
        urls = info.data.get("urls")
        if name is None and urls:  # the first URL's extension, as the dataset is made
            with contextlib.suppress(ValueError, TypeError):
                name = format_for_url(urls if isinstance(urls, str) else urls[0])
        if name is not None:  # a folder, or a name without an extension: its files decide
            settings = options.to_settings()
            format_options(name, settings.columns, settings.record_size, settings.verify,
                           settings.example, settings.index_dir)  # fmt: skip
        return options

    @classmethod
    def from_spec(cls, spec: DatasetSpec) -> Self:
        """The config of ``spec`` (knobs kept out of files are dropped)."""
        return cls.model_validate(plain(spec))

    def to_spec(self) -> DatasetSpec:
        """The :class:`~fastio.spec.DatasetSpec` this config describes."""
        spec: DatasetSpec = self.to_settings()
        return spec

    def to_dict(self, *, only_changed: bool = False, unset: bool = False) -> dict[str, Any]:
        """Plain data as a config file holds it: sizes as ``"64MiB"`` where exact,
        keys unset (null) where that is their default left out (TOML has no
        null; with ``unset``, kept), and with ``only_changed`` only what
        differs from the defaults. A key unset where its default is a value
        (``tuner.seed``: unset is random, the default 0) stays, as null."""
        data = self.model_dump(mode="json", exclude_defaults=only_changed)
        return data if unset else _without_unset(self, data)

    def to_dataset(self) -> Dataset:
        """The :class:`fastio.Dataset` this config describes. Raises what
        :meth:`fastio.Dataset.from_spec` raises (OSError for shards it cannot
        read, ValueError for URLs that name none)."""
        from fastio.dataset._dataset import Dataset

        return Dataset.from_spec(self.to_spec())


def _without_unset(model: BaseModel, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (``model`` dumped) less the null values of fields whose default is null."""
    kept: dict[str, Any] = {}
    for name, value in data.items():
        field = type(model).model_fields.get(name)
        if value is None and (field is None or field.get_default(call_default_factory=True)
                              is None):  # fmt: skip
            continue
        current = getattr(model, name, None)
        if isinstance(value, dict) and isinstance(current, BaseModel):
            value = _without_unset(current, value)
        elif isinstance(value, list) and isinstance(current, tuple):
            value = [_without_unset(one, item) if isinstance(one, BaseModel) else item
                     for one, item in zip(current, value, strict=True)]  # fmt: skip
        kept[name] = value
    return kept


def plain(settings: Any) -> dict[str, Any]:
    """The knobs of a settings instance that a file may hold, as plain data."""
    result: dict[str, Any] = {}
    for name, spec in knobs(settings).items():
        if spec.in_config:
            value = getattr(settings, name)
            if dataclasses.is_dataclass(value):
                value = plain(value)
            elif spec.kind == "sections":
                value = [plain(one) for one in value]
            result[name] = value
    return result


_SIZE_TEXT = PlainSerializer(size_text, when_used="json-unless-none")


def section_model(
    settings: type[Any], base: type[Section] = Section, name: str | None = None
) -> type[Section]:
    """The config section of the settings class ``settings`` (named after it
    unless ``name`` is given); sections within it are made too. ``base``
    carries the methods of the whole config."""
    declared = {field.name: field for field in dataclasses.fields(settings)}
    fields: dict[str, Any] = {
        key: _field(key, spec, declared[key])
        for key, spec in knobs(settings).items()
        if spec.in_config
    }
    name = name or settings.__name__.removesuffix("Settings") + "Section"
    doc = settings.__doc__ if base is Section else base.__doc__
    model = create_model(name, __base__=base, __module__=__name__, __doc__=doc, **fields)
    model.settings = settings
    return model


def _field(name: str, spec: Knob, field: dataclasses.Field[Any]) -> tuple[Any, Any]:
    """A pydantic field: (annotation, default) of the knob ``name``."""
    annotation: Any
    if spec.kind == "section":
        model = section_model(_settings_class(spec))
        return model, Field(default_factory=model, description=spec.doc)
    if spec.kind == "sections":
        item = section_model(_settings_class(spec))
        annotation = tuple[item, ...]  # type: ignore[valid-type]
    elif spec.kind == "size":
        annotation = Annotated[Any, AfterValidator(_checker(name, spec)), _SIZE_TEXT]
    else:
        annotation = Annotated[Any, AfterValidator(_checker(name, spec))]
    if field.default is not dataclasses.MISSING:
        return annotation, Field(field.default, description=spec.doc)
    if field.default_factory is not dataclasses.MISSING:
        return annotation, Field(default_factory=field.default_factory, description=spec.doc)
    return annotation, Field(description=spec.doc)  # required


def _settings_class(spec: Knob) -> type[Any]:
    assert spec.of is not None, "a section knob names its settings class"
    return spec.of


def _checker(name: str, spec: Knob) -> Any:
    def check(value: Any) -> Any:
        try:
            return check_value(name, spec, value)
        except (TypeError, ValueError) as error:
            # The key path goes in front, where a keyword's message has its name.
            raise ValueError(str(error).removeprefix(f"{name} ")) from None

    return check


def sections(model: type[BaseModel]) -> dict[str, type[Section]]:
    """The fields of ``model`` that are sections, or lists of them: name -> section."""
    found = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if typing.get_origin(annotation) is tuple:
            annotation = typing.get_args(annotation)[0]
        if isinstance(annotation, type) and issubclass(annotation, Section):
            found[name] = annotation
    return found


if TYPE_CHECKING:
    DatasetConfig = ConfigBase
else:
    DatasetConfig = section_model(DatasetSpec, ConfigBase, "DatasetConfig")


def _expose(model: type[BaseModel]) -> None:
    # Pickle finds a class by its module and name: each section is a name here.
    for section in sections(model).values():
        globals()[section.__name__] = section
        _expose(section)


_expose(DatasetConfig)


def defaults() -> dict[str, Any]:
    """Every key but ``urls`` (which has none) with its default, as files hold them."""
    data = DatasetConfig.model_construct(urls="").to_dict(unset=True)  # "" is no URL: not checked
    del data["urls"]
    return data
