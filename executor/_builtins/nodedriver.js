// The JavaScript side of the code interpreter's stdio protocol (see pydriver.py):
// run as `node -e <this file> <nonce>`. Cells run with vm.runInThisContext, so
// globals and top-level let/const/class declarations persist across cells, as
// in node's own REPL; a cell's completion value is its result (a promise is
// awaited; a cell with a top-level await runs as an async function). SIGINT
// interrupts the running cell (breakOnSigint) or the awaited promise, and is
// ignored between cells.
(() => {
  "use strict";
  const vm = require("vm");
  const util = require("util");
  const fs = require("fs");
  const readline = require("readline");
  const nonce = process.argv[1] || "0";
  const frameStart = "\x1e" + nonce + ":";
  const frame = (message) => fs.writeSync(1, frameStart + JSON.stringify(message) + "\n");
  let interrupt = null;
  process.on("SIGINT", () => {
    if (interrupt !== null) interrupt();
  });
  globalThis.require = require;
  globalThis.module = module;
  globalThis.display = (...values) => {
    for (const value of values) frame({ t: "result", plain: util.inspect(value), html: null });
  };
  let cells = 0;
  const describe = (error) => {
    if (error instanceof Error) {
      return { ename: error.name, evalue: error.message, traceback: String(error.stack || error) };
    }
    return { ename: "Error", evalue: util.inspect(error), traceback: "Uncaught " + util.inspect(error) };
  };
  // A cell with a top-level await runs as an async function: an expression's
  // value is its result; a block's declarations stay inside it (as in a function).
  const compile = (code, filename) => {
    try {
      return new vm.Script(code, { filename });
    } catch (error) {
      if (!(error instanceof SyntaxError) || !/await/.test(String(error.message))) throw error;
    }
    try {
      return new vm.Script("(async () => (\n" + code + "\n))()", { filename });
    } catch (error) {
      return new vm.Script("(async () => {\n" + code + "\n})()", { filename });
    }
  };
  const run = async (code) => {
    cells += 1;
    let ok = true;
    try {
      const script = compile(code, "cell" + cells);
      let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
      if (value !== null && typeof value === "object" && typeof value.then === "function") {
        value = await Promise.race([
          value,
          new Promise((_, reject) => {
            interrupt = () => reject(new Error("Script execution was interrupted by `SIGINT`"));
          }),
        ]);
      }
      if (value !== undefined) frame({ t: "result", plain: util.inspect(value), html: null });
    } catch (error) {
      ok = false;
      frame({ t: "error", ...describe(error) });
    } finally {
      interrupt = null;
    }
    frame({ t: "done", ok });
    fs.writeSync(2, frameStart + "end\n");
  };
  const queue = [];
  let busy = false;
  const next = async () => {
    if (busy) return;
    busy = true;
    while (queue.length > 0) {
      const line = queue.shift();
      let code;
      try {
        code = JSON.parse(line).code;
        if (typeof code !== "string") throw new Error("no code");
      } catch (error) {
        frame({ t: "error", ename: "ProtocolError", evalue: "bad request", traceback: "bad request" });
        frame({ t: "done", ok: false });
        fs.writeSync(2, frameStart + "end\n");
        continue;
      }
      await run(code);
    }
    busy = false;
  };
  // The requests come on stdin, a line each; a cell should not read process.stdin itself.
  const input = readline.createInterface({ input: process.stdin, terminal: false });
  input.on("line", (line) => {
    queue.push(line);
    next();
  });
  input.on("close", () => {
    const wait = () => (busy ? setTimeout(wait, 10) : process.exit(0));
    wait();
  });
  frame({ t: "ready", version: process.versions.node });
})();
