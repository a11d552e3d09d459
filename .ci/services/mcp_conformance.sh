# The official MCP conformance suite, for tests/test_mcp_conformance.py: sourced by .ci/run.
#
# Installs @modelcontextprotocol/conformance at one pinned version from npm
# into a folder of its own outside the repository, with a `conformance`
# command beside it, and exports EXECUTOR_MCP_CONFORMANCE (that command) and
# EXECUTOR_REQUIRE_MCP_CONFORMANCE=1 so that the test fails instead of
# skipping. The test starts the server it tests itself (127.0.0.1, a free
# port) and stops it by pid: nothing runs in the background here. Idempotent:
# an install of the pinned version is used as it is.
#
# The package asks for Node 22 but runs on Node 20 (>= 20.18, for its undici):
# the one thing it lacks there is fs.globSync, which the package imports for
# its tier-check command only. The command loads, with --import, a module that
# hands the package's modules an fs with a globSync that throws when called;
# on Node 22 and later it does nothing. The package's own files are untouched.

mcp_conformance_version=0.2.0-alpha.12
mcp_conformance_dir=${EXECUTOR_MCP_CONFORMANCE_HOME:-/tmp/executor-ci-mcp-conformance}

install_mcp_conformance() {
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    fi
    # module.register (for the fs.globSync module) and the package's undici 7.
    if ! node -e '
        const [major, minor] = process.versions.node.split(".").map(Number);
        process.exit(major > 20 || (major === 20 && minor >= 18) ? 0 : 1);
    '; then
        echo "mcp conformance: node $(node --version) is too old, it needs 20.18 or later" >&2
        return 1
    fi
    local package=$mcp_conformance_dir/node_modules/@modelcontextprotocol/conformance
    local installed=""
    if [ -f "$package/package.json" ]; then
        installed=$(node -p 'require(process.argv[1]).version' "$package/package.json")
    fi
    if [ "$installed" != "$mcp_conformance_version" ]; then
        mkdir -p "$mcp_conformance_dir"
        npm install --prefix "$mcp_conformance_dir" --no-audit --no-fund --engine-strict=false \
            --loglevel=error "@modelcontextprotocol/conformance@$mcp_conformance_version" >/dev/null
    fi

    cat >"$mcp_conformance_dir/fs-globsync.mjs" <<'EOF'
// Loaded with `node --import`: on a Node without fs.globSync (before 22), every
// import of fs or node:fs gets a module with all of fs and a globSync that
// throws when called (the conformance suite imports it for tier-check only).
import fs from "node:fs";
import { register } from "node:module";

if (typeof fs.globSync !== "function") {
  const shim = `
    import fs from "node:fs";
    export * from "node:fs";
    export default fs;
    export function globSync() {
      throw new Error("fs.globSync needs Node 22 or later");
    }
  `;
  const shimUrl = "data:text/javascript," + encodeURIComponent(shim);
  const hooks = `
    export async function resolve(specifier, context, next) {
      if ((specifier === "fs" || specifier === "node:fs") && !context.parentURL?.startsWith("data:")) {
        return { url: ${JSON.stringify(shimUrl)}, shortCircuit: true };
      }
      return next(specifier, context);
    }
  `;
  register("data:text/javascript," + encodeURIComponent(hooks));
}
EOF
    cat >"$mcp_conformance_dir/conformance" <<EOF
#!/bin/sh
# @modelcontextprotocol/conformance $mcp_conformance_version (see .ci/services/mcp_conformance.sh)
exec node --import "$mcp_conformance_dir/fs-globsync.mjs" \\
    "$package/dist/index.js" "\$@"
EOF
    chmod 755 "$mcp_conformance_dir/conformance"
    local said
    said=$("$mcp_conformance_dir/conformance" --version)
    if [ "$said" != "$mcp_conformance_version" ]; then
        echo "mcp conformance: the command says version '$said'" >&2
        return 1
    fi
    echo "mcp conformance $said: $mcp_conformance_dir/conformance"
}

stop_mcp_conformance() {
    # Nothing runs in the background: the test stops the server it started.
    :
}

install_mcp_conformance
export EXECUTOR_MCP_CONFORMANCE=$mcp_conformance_dir/conformance
export EXECUTOR_REQUIRE_MCP_CONFORMANCE=1
cleanups+=(stop_mcp_conformance)
