"""Shared CLI plumbing: error mapping, one-line warnings, option checks, a group with a default command."""

from __future__ import annotations

import errno
import math
import os
import re
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from attnscope.devices import check_device  # noqa: F401  (re-exported for the CLI modules)
from attnscope.errors import (
    DEBUG_ENV,
    AttnscopeError,
    InputError,
    debug_enabled,
    install_one_line_warnings,
)
from attnscope.tables import TABLE_SUFFIXES, check_writable, storage_error

#: OSErrors caused by the user's paths or machine (exit 2), as opposed to bugs (exit 1)
USER_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR,
               errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP, errno.EMFILE, errno.ENOMEM}


def _first_line(text: str) -> str:
    return (str(text).strip().splitlines() or [""])[0]


def _flags_take_no_value() -> None:
    """Show flags as flags in ``--help``: typer's help prints a type after every option, ``<bool>``
    after a flag too (``--json <bool>``), which reads as if the flag took a value. Patched once, here."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)  # typer before 0.2x prints no type column at all
    if shown is None or getattr(shown, "_attnscope", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    display_type_rich._attnscope = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's own flush at exit does not hit the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _is_broken_pipe(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a write to a closed pipe (the SystemExit that typer, click and rich raise on one
    is raised while handling it, so it is that exit's ``__context__``)."""
    return isinstance(exc, BrokenPipeError) or (isinstance(exc, OSError) and exc.errno == errno.EPIPE)


class Terminated(BaseException):
    """SIGTERM (``scancel``, ``timeout``, a job manager) raised in the main thread, so that the same cleanup as
    for Ctrl-C runs: pool workers are ended, temporaries removed. A BaseException: no task handler swallows it."""


#: the stop signals this process received (set by the handlers run_app installs)
_SIGNALLED: list[int] = []


def _raise_terminated(signum: int, frame: Any) -> None:
    _SIGNALLED.append(signum)
    raise Terminated()


def _raise_interrupt(signum: int, frame: Any) -> None:
    _SIGNALLED.append(signum)
    raise KeyboardInterrupt


def _stop_now(code: int) -> None:
    """End the process with ``code`` once a stop has unwound the command. After a real signal (SIGTERM, Ctrl-C)
    the command's own cleanup (``finally`` blocks, staging folders, worker processes) has run, and so do the
    atexit hooks; the interpreter's own teardown (freeing every module and tensor one by one) is skipped: after
    a model was loaded it takes seconds to tens of seconds, while the user waits for a process that said
    "terminated". Without a signal (an interrupt raised in this process, e.g. by a test) a plain exit."""
    if not _SIGNALLED:
        sys.exit(code)
    import atexit

    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _cache_folders() -> dict[str, tuple[str, list[Path]]]:
    """{environment variable: (the module reading it, the folders it writes its config or cache into by default)}.

    matplotlib checks its config folder on import (a PermissionError traceback where HOME cannot be
    searched); numba writes the compiled kernels of ``cache=True`` functions beside their source or
    into the user's cache folder, and refuses to decorate them when neither can be written."""
    home = Path(os.path.expanduser("~"))
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache")
    kernels = Path(__file__).resolve().parents[1] / "dynamics" / "__pycache__"
    return {"MPLCONFIGDIR": ("matplotlib", [config / "matplotlib", cache / "matplotlib"]),
            "NUMBA_CACHE_DIR": ("numba", [kernels, cache / "numba"])}


def writable_cache_dirs() -> list[str]:
    """Point ``MPLCONFIGDIR`` / ``NUMBA_CACHE_DIR`` at fresh temporary folders (removed at exit) when the
    folders matplotlib or numba would write cannot be written or even searched (a HOME, XDG or cache folder
    this user may not use, an unwritable value of the variable itself); the variables changed.

    Silent: figures and numbers are unchanged, only those libraries' caches are rebuilt there for this run.
    Must run before matplotlib or numba is imported (both read the variables on import)."""
    from attnscope.tables import can_write_in

    changed = []
    for var, (module, defaults) in _cache_folders().items():
        if module in sys.modules:
            continue
        given = os.environ.get(var)
        folders = [Path(given)] if given else defaults
        check = all if var == "MPLCONFIGDIR" or given else any  # numba needs one of its two places
        if check(can_write_in(f) for f in folders):
            continue
        import atexit
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix=f"attnscope-{module}-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ[var] = folder
        changed.append(var)
    return changed


def run_app(app: typer.Typer) -> None:
    """Run a typer app with the CLI's error contract.

    * :class:`AttnscopeError` (the user's input) -> ``attnscope: error: <one line>``, exit 2;
    * an OSError about the user's paths or machine (a full disk, permissions) -> one line naming
      the path, exit 2;
    * anything else is a bug -> ``attnscope: internal error: ...`` on one line, exit 1;
    * Ctrl-C -> ``attnscope: interrupted``, exit 130; SIGTERM -> ``attnscope: terminated``, exit 143 (both
      after the same cleanup); a closed stdout pipe -> exit 0.

    Tracebacks only with ``--debug`` / ``ATTNSCOPE_DEBUG=1`` (printed before the same line and exit
    code). Warnings print as one line each (raw Python warnings with ``--debug``).
    Usage errors (bad options) are handled by typer's standalone mode (usage + exit 2).
    """
    if "--debug" in sys.argv[1:]:  # honoured even when the failure happens while parsing
        os.environ[DEBUG_ENV] = "1"
    install_one_line_warnings(lambda text, names: in_flags(text, names, command_params(app, sys.argv[1:])))
    writable_cache_dirs()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # Ctrl-C: noted, then as Python does
            signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        check_option_integers(sys.argv[1:])
        check_no_empty_arguments(sys.argv[1:])
        app()
    except Terminated:
        print("attnscope: terminated", file=sys.stderr)
        _stop_now(143)
    except KeyboardInterrupt:  # raised outside typer's own handling (while parsing)
        print("attnscope: interrupted", file=sys.stderr)
        _stop_now(130)
    except SystemExit as exc:  # typer turns Ctrl-C inside a command into a silent Exit(130)
        if exc.code == 130:
            print("attnscope: interrupted", file=sys.stderr)
            _stop_now(130)
        if _is_broken_pipe(exc.__context__):  # typer's standalone mode (and rich's Console) exit 1 there
            _silence_stdout()
            sys.exit(0)
        raise
    except BrokenPipeError:  # `attnscope ... | head -1`: the reader is gone, which is not an error
        _silence_stdout()
        sys.exit(0)
    except Exception as exc:
        if debug_enabled():
            traceback.print_exc()
        code, line = describe_error(exc, command_params(app, sys.argv[1:]))
        print(line, file=sys.stderr)
        sys.exit(code)


#: the largest integer an option may hold: counts, steps and seeds reach numpy / numba / torch as int64
MAX_OPTION_INT = 2**63 - 1
_INT_TOKEN = re.compile(r"[+-]?\d+")


def check_option_integers(argv: list[str]) -> None:
    """Refuse an option value that is a whole number beyond int64 (``--steps 99999999999999999999``).

    Every integer option ends up in numpy, numba or torch as a 64-bit integer, where such a value
    overflows deep inside the work (or after it started); checked once here, for every command.
    """
    for i, arg in enumerate(argv):
        if arg.startswith("--") and "=" in arg:
            option, value = arg.split("=", 1)
        elif i > 0 and argv[i - 1].startswith("-") and not argv[i - 1].startswith("---"):
            option, value = argv[i - 1], arg
        else:
            continue
        digits = value.strip().lstrip("+-").lstrip("0")
        if _INT_TOKEN.fullmatch(value.strip()) and (len(digits) > 19 or int(digits or 0) > MAX_OPTION_INT):
            shown = value.strip() if len(value.strip()) <= 24 else f"{value.strip()[:20]}... ({len(digits)} digits)"
            raise InputError(f"{option} {shown} is too large (whole numbers must fit in 64 bits)")


def check_no_empty_arguments(argv: list[str]) -> None:
    """Refuse an empty argument (``--out ''``, ``--out=``, ``''`` as a SOURCE): no option or argument of any
    command means anything when empty, and a path read as ``Path('')`` is silently the current directory."""
    for i, arg in enumerate(argv):
        if arg.startswith("--") and arg.endswith("=") and arg.count("=") == 1:
            raise InputError(f"{arg[:-1]} is given an empty value")
        if arg.strip() == "":
            before = argv[i - 1] if i > 0 else ""
            if before.startswith("-") and "=" not in before:
                raise InputError(f"{before} is given an empty value")
            raise InputError("an argument is empty")


def describe_error(exc: BaseException, params: list[Any] | None = None) -> tuple[int, str]:
    """(exit code, one stderr line) for an exception that reached the CLI.

    An :class:`AttnscopeError`'s message names Python parameters (``exc.params``); they are shown as
    the flags of the command that ran (``params``: its click parameters, see :func:`command_params`).
    """
    if isinstance(exc, AttnscopeError):
        text = in_flags(_first_line(str(exc)), exc.params, params or [])
        return exc.exit_code, f"attnscope: error: {text or type(exc).__name__}"
    if isinstance(exc, OSError) and exc.errno in USER_ERRNOS:
        where = exc.filename if exc.filename is not None else "a file"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            return 2, f"attnscope: error: {storage_error(where, exc)}"
        return 2, f"attnscope: error: {where}: {exc.strerror}"
    what = _first_line(str(exc))
    return 1, (f"attnscope: internal error: {type(exc).__name__}{': ' + what if what else ''} "
               f"(a bug; rerun with --debug or {DEBUG_ENV}=1 for the traceback)")


# -- Python parameter names -> the flags of the command that ran ------------------------------------------

#: library parameter names whose CLI option has another name (tried when the command has no option of that name)
PARAM_OPTIONS = {"k": "exponents", "lyap_k": "exponents", "init": "init_state", "time_min": "slurm_time",
                 "mem_gb": "slurm_mem", "partition": "slurm_partition", "run_dirs": "runs", "out_dir": "out",
                 "levels": "level", "stacks": "stack", "cfg": "config", "probes": "probe"}


def command_params(app: typer.Typer, argv: list[str]) -> list[Any]:
    """The click parameters of the (sub)command ``argv`` invokes, the groups' own options included."""
    try:
        cmd = typer.main.get_command(app)
    except Exception:  # never let the error path fail
        return []
    params = list(cmd.params)
    for token in argv:
        commands = getattr(cmd, "commands", None)
        if not commands:
            break
        if token.startswith("-"):
            continue
        if token not in commands and isinstance(cmd, DefaultCommandGroup):
            token = cmd.default_command
        if token not in commands:
            break
        cmd = commands[token]
        params += list(cmd.params)
    return params


def flag_of(name: str, params: list[Any], value: str | None = None) -> str:
    """The flag for Python parameter ``name`` (``value``: ``True``/``False`` of a boolean picks its on/off form)."""
    by_name = {p.name: p for p in params if getattr(p, "opts", None)}
    p = by_name.get(name) or by_name.get(PARAM_OPTIONS.get(name, "")) or by_name.get(f"no_{name}")
    if p is None:
        return f"--{name.replace('_', '-')}"
    if getattr(p, "param_type_name", "") == "argument":  # a positional argument: its name as --help shows it
        return str(p.name).upper()
    longs = [o for o in p.opts if o.startswith("--")] or list(p.opts)
    if value == "False" and getattr(p, "secondary_opts", None):
        return p.secondary_opts[0]
    return longs[0]


def in_flags(message: str, names: tuple[str, ...], params: list[Any]) -> str:
    """``message`` with each parameter in ``names`` shown as its flag: ``windows`` -> ``--windows``,
    ``resume=True`` -> ``--resume``, ``steps=5`` -> ``--steps 5``; other words are left alone."""
    for name in names:
        if name.startswith("-"):  # already a flag (a CLI-only check)
            continue

        def repl(m: re.Match, name: str = name) -> str:
            value = m.group(1)
            flag = flag_of(name, params, value)
            if value in ("True", "False"):
                return flag
            return f"{flag} {value}" if value else flag

        message = re.sub(rf"(?<![\w\-./'`]){re.escape(name)}(?:=([^\s,;)]+))?(?![\w/'`])", repl, message)
    return message


# -- option checks shared by the commands ---------------------------------------------------------

#: ``--threads`` of every command that computes (the rule: attnscope.threads)
THREADS = typer.Option(None, "--threads", metavar="INTEGER", show_default=False,
                       help="CPU threads (torch, BLAS, numba), 1 to 1024. Default: ATTNSCOPE_THREADS, else OMP_NUM_THREADS, else "
                            "the CPUs this process may use minus the 1-minute load average, at least 1.")


def use_threads(threads: int | None) -> int:
    """Set the CPU threads of this command (``--threads``; None: ATTNSCOPE_THREADS or the default rule)."""
    from attnscope.threads import MAX_THREADS, available_cpus, set_threads

    if threads is not None and threads < 1:
        raise InputError(f"--threads must be at least 1, not {threads}")
    if threads is not None and threads > MAX_THREADS:
        raise InputError(f"--threads must be at most {MAX_THREADS} (this machine has {available_cpus()} CPUs), not {threads}")
    return set_threads(threads)



def check_out_file(path: Path | None, option: str = "--out",
                   suffixes: tuple[str, ...] | None = TABLE_SUFFIXES, inputs: Any = (),
                   companions: tuple[str, ...] = ()) -> Path | None:
    """Check an output file option (a table by default) is writable before any work starts (None passes),
    that it is none of the command's ``inputs`` (model sources, tables read) nor a file inside an input
    folder (``geometry DIR --out DIR/config.json`` would replace the model's own config), and that neither it
    nor its ``companions`` (file names written beside it) holds a file attnscope cannot prove it wrote
    (:func:`attnscope.outputs.check_result_file`); write it with :func:`attnscope.outputs.write_result_file`."""
    if path is None:
        return None
    from attnscope.outputs import check_result_file

    _not_an_input(path, option, inputs)
    path = check_writable(path, option, suffixes=suffixes)
    check_result_file(path, companions, params=option.lstrip("-").replace("-", "_"))
    return path


def write_out_table(df: Any, path: Path, *, kind: str, companions: dict[str, Any] | None = None) -> Path:
    """``df`` to the ``--out`` file ``path`` (format by extension) as attnscope's own result there, with the
    tables of ``companions`` ({file name beside it: DataFrame}); see :func:`check_out_file`."""
    from attnscope.outputs import write_result_file
    from attnscope.tables import table_bytes

    return write_result_file(path, table_bytes(df, path), kind=kind,
                             companions={n: table_bytes(t, n) for n, t in (companions or {}).items()})


def check_out_names(path: Path | None, names: Any, option: str = "--out") -> Path | None:
    """Check an output folder option is writable and holds no file of the user's under any of ``names`` (the
    files the command may write there), before any work starts (None passes through)."""
    if path is None:
        return None
    from attnscope.outputs import check_result_names

    path = check_writable(path, option, directory=True)
    check_result_names(path, list(names), params=option.lstrip("-").replace("-", "_"))
    return path


def _a_table(path: Path) -> bool:
    """Whether ``path`` (in a model folder) may be a table of attnscope's: CSV, Parquet or JSON records (a list),
    never a model's own JSON (config.json, tokenizer.json: objects)."""
    if path.suffix.lower() != ".json":
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(64).lstrip()[:1] == b"["
    except OSError:
        return False


def _not_an_input(path: Path, option: str, inputs: Any) -> None:
    target = Path(path).expanduser()
    if not target.exists():
        return
    for given in inputs or ():
        if given is None:
            continue
        local = Path(str(given)).expanduser()
        if not local.exists():
            from attnscope.zoo.registry import resolve_spec  # a zoo id: its installed copy

            try:
                local = Path(str(resolve_spec(str(given)))).expanduser()
            except Exception:  # noqa: BLE001 - a source that does not resolve is refused later, in its own words
                continue
            if not local.exists():
                continue
        try:
            inside = (local.is_dir() and target.is_file() and target.resolve().is_relative_to(local.resolve())
                      and not _a_table(target))
            same = not local.is_dir() and os.path.samefile(target, local)
        except OSError:
            continue
        if same or inside:
            raise InputError(f"{option} {path} is {'a file of ' if inside else ''}the input {given}: writing the result "
                             "there would replace it; choose another path")


def check_out_dir(path: Path | None, option: str = "--plot") -> Path | None:
    """Check an output directory option is writable before any work starts (None passes through)."""
    return None if path is None else check_writable(path, option, directory=True)


def positive(value: float | None, option: str, minimum: float = 1, strict: bool = False) -> None:
    """Refuse a non-finite value or one below ``minimum`` (``strict``: at or below); None = unset, fine."""
    if value is None:
        return
    if not math.isfinite(value) or value < minimum or (strict and value == minimum):
        bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise InputError(f"{option} must be a finite number {bound}, not {value}")


def fits_32_bits(value: float | None, option: str) -> None:
    """Refuse a count Slurm or the process pool keeps in 32 bits (``--slurm-time 9999999999``)."""
    if value is not None and abs(value) >= 2**31:
        raise InputError(f"{option} {value} is too large")


def slurm_options(executor: str, partition: str | None = None, time_min: int | None = None,
                  mem_gb: float | None = None, gpus: int | None = None, cpus: int | None = None) -> dict | None:
    """The ``--slurm-*`` options as the executors' ``slurm`` dict (None unless ``--executor slurm``), checked:
    given without ``--executor slurm`` or not positive and finite is one line."""
    given = {"partition": partition, "time_min": time_min, "mem_gb": mem_gb, "gpus": gpus}
    if executor != "slurm":
        if any(v is not None for v in given.values()):
            raise InputError(f"--slurm-* options need --executor slurm (not {executor})")
        return None
    positive(time_min, "--slurm-time")
    positive(mem_gb, "--slurm-mem", minimum=0, strict=True)
    positive(gpus, "--slurm-gpus")
    for value, flag in ((time_min, "--slurm-time"), (gpus, "--slurm-gpus"), (mem_gb, "--slurm-mem")):
        fits_32_bits(value, flag)
    opts = {key: val for key, val in given.items() if val is not None}
    if cpus is not None:
        opts["cpus_per_task"] = cpus
    return opts


def old_name(old_value: Any, value: Any, default: Any, old: str, new: str) -> Any:
    """The value of an option given under its old (hidden) name ``old`` or its new name ``new``; both is one line."""
    if old_value is None:
        return value
    if value != default:
        raise InputError(f"{old} is the old name of {new}; give only {new}")
    return old_value


def distinct_sources(sources: list[str]) -> None:
    """Refuse the same SOURCE given twice (same string, two spellings of one local path, or a zoo id and
    the path of its installed copy), and two SOURCEs that the tables would give one ``model`` name."""
    from attnscope.naming import model_label
    from attnscope.zoo.registry import resolve_spec

    seen: dict[str, str] = {}
    named: dict[str, str] = {}
    for s in sources:
        p = Path(str(resolve_spec(s))).expanduser()
        ident = str(p.resolve()) if p.exists() else s
        if ident in seen:
            same = f" ({seen[ident]} and {s} are the same path)" if seen[ident] != s else ""
            raise InputError(f"SOURCE {s} is given twice{same}")
        seen[ident] = s
        name = model_label(s)
        if name in named:
            raise InputError(f"SOURCE {named[name]} and {s} would both be named {name} in the tables' model column; "
                             "score them in separate runs (or rename one's file or folder)")
        named[name] = s


class DefaultCommandGroup(TyperGroup):
    """A group whose first argument is a subcommand name, or else the arguments of a default command.

    ``attnscope geometry SOURCE ...`` and ``attnscope geometry plot RESULTS`` can then coexist:
    anything that is not a known subcommand name is routed to the command named ``default_command``.
    Use it as ``typer.Typer(cls=DefaultCommandGroup)`` and register the default command under the
    name given by the class attribute (``score`` unless overridden with ``make_default_group``).
    """

    default_command: str = "score"

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [self.default_command, *args]
        elif not args and self.default_command in self.commands:
            args = [self.default_command, "--help"]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: Any, formatter: Any) -> None:
        formatter.write_usage(ctx.command_path, f"[{self.default_command.upper()} ARGS] | COMMAND [ARGS]")

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """The group's help shows the default command's arguments and options (what ``--help`` readers
        look for), and says so, above the list of subcommands."""
        default = self.commands.get(self.default_command)
        if default is None:
            return super().format_help(ctx, formatter)
        own_help = self.help
        self.help = (f"{own_help or ''}\n\nThe arguments and options below are those of the default command "
                     f"`{ctx.command_path} {self.default_command}`; a COMMAND has its own (COMMAND --help).")
        self._with_default = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self.help, self._with_default = own_help, False

    def get_params(self, ctx: Any) -> list[Any]:
        own = super().get_params(ctx)
        default = self.commands.get(self.default_command)
        if not getattr(self, "_with_default", False) or default is None:  # parsing: the group's own only
            return own
        return [*default.params, *own]


def make_default_group(default: str) -> type[DefaultCommandGroup]:
    """A DefaultCommandGroup subclass whose default command is ``default``."""
    return type(f"DefaultGroup_{default}", (DefaultCommandGroup,), {"default_command": default})


def echo_json(text: str) -> None:
    """Print JSON (already serialised) to stdout and nothing else."""
    sys.stdout.write(text)
    if not text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()



def console(stderr: bool = True) -> Any:
    """The CLI's rich console (stderr by default: summaries never pollute ``--json`` on stdout).

    Its width is the terminal's, or ``COLUMNS`` when set (80 off a terminal otherwise): tables are split
    to fit it. Off a terminal (a log, a pipe, a notebook's captured stderr) a line of prose is never
    wrapped: one message stays one line, whatever its length.
    """
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich's own hook (later 13.x) exits 1; the contract is exit 0 (run_app)
            self.quiet = True
            raise BrokenPipeError

    con = _Console(stderr=stderr)
    if not con.is_terminal:
        con.soft_wrap = True
    return con


def stderr_console() -> Any:
    """:func:`console` on stderr."""
    return console(stderr=True)
