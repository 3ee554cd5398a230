// ONNX Runtime as a peer of bench/model_bench.py: a Node process that loads models into
// onnxruntime-node sessions and times calls on request, so that the Python side can
// interleave its own libraries and PyTorch with ONNX Runtime, round by round, in one run.
//
// One JSON request per line on stdin, one JSON reply per line on stdout:
//   {"op": "load", "id": K, "model": PATH, "threads": T, "input": RAW, "dims": [...], "output": RAW,
//    "optimization": LEVEL}
//       a session with T intra-op threads, one inter-op thread, sequential execution and
//       graph optimisation LEVEL (ONNX Runtime's: disabled, basic, extended, all; default
//       all); RAW files hold float32 data: the input is read from one,
//       and the first output of one call is written to the other (for the error check);
//       with "outputs_dir": DIR, every output is also written, as DIR/<k>.raw in the session's
//       output order, and the reply lists them: "outputs": [{"name", "dims", "type", "file"}].
//   {"op": "time", "id": K, "calls": N, "warmup_ms": W}
//       calls for W ms untimed, then N calls, each timed: {"ok": true, "times_s": [...]}
// Errors answer {"ok": false, "error": "..."}; the process stays up for the next request.
//
// Run with NODE_PATH naming the node_modules that holds onnxruntime-node (1.30 ships its CPU
// library inside the package: npm install --ignore-scripts onnxruntime-node@1.30.0).
'use strict';
const fs = require('fs');
const readline = require('readline');
const ort = require('onnxruntime-node');

const sessions = new Map();

async function load(req) {
  const session = await ort.InferenceSession.create(req.model, {
    intraOpNumThreads: req.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: req.optimization || 'all',
  });
  const raw = fs.readFileSync(req.input);
  const data = new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
  const feeds = {[session.inputNames[0]]: new ort.Tensor('float32', data, req.dims)};
  const out = await session.run(feeds);
  const bytes = (t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  const first = out[session.outputNames[0]];
  fs.writeFileSync(req.output, bytes(first));
  const reply = {ok: true, version: ort.env.versions ? ort.env.versions.common : undefined, dims: first.dims};
  if (req.outputs_dir) {
    reply.outputs = session.outputNames.map((name, k) => {
      const t = out[name], file = `${req.outputs_dir}/${k}.raw`;
      fs.writeFileSync(file, bytes(t));
      return {name, dims: t.dims, type: t.type, file};
    });
  }
  sessions.set(req.id, {session, feeds});
  return reply;
}

async function time(req) {
  const s = sessions.get(req.id);
  if (!s) throw new Error(`no session ${req.id}`);
  const warm = process.hrtime.bigint() + BigInt(Math.round((req.warmup_ms || 0) * 1e6));
  while (process.hrtime.bigint() < warm) await s.session.run(s.feeds);
  const times = [];
  for (let i = 0; i < req.calls; ++i) {
    const start = process.hrtime.bigint();
    await s.session.run(s.feeds);
    times.push(Number(process.hrtime.bigint() - start) / 1e9);
  }
  return {ok: true, times_s: times};
}

async function main() {
  const lines = readline.createInterface({input: process.stdin});
  for await (const line of lines) {
    let reply;
    try {
      const req = JSON.parse(line);
      if (req.op === 'load') reply = await load(req);
      else if (req.op === 'time') reply = await time(req);
      else throw new Error(`unknown op ${JSON.stringify(req.op)}`);
    } catch (e) {
      reply = {ok: false, error: String(e && e.message ? e.message : e)};
    }
    process.stdout.write(JSON.stringify(reply) + '\n');
  }
}

main();
