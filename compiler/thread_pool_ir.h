// thread_pool_ir: the thread pool that CPU kernels run their parallel loops on, emitted as
// LLVM IR into the kernel's own module.
//
// `tf_parallel_launch(fn, data)` calls `fn(data, c, n)` once for each chunk c in [0, n) and
// returns when every call has returned; n is 4 chunks per thread of the team (1 when the team
// is one thread), so a thread that another process slows hands the rest of its share to the
// others: ResNet-50 at 2 threads on the noisy 2-core VM, 1 chunk a thread against 4, library
// against library interleaved: batch 32 1,438 -> 1,170 and 1,450 -> 1,247 ms, batch 1 46.0 ->
// 36.4 and 50.6 -> 45.8 ms (spreads 33-71%; the 1-thread controls, the same code, within 0.92-1.07).
// The team size is libgomp's omp_get_max_threads()
// of the calling thread (so OMP_NUM_THREADS, omp_set_num_threads and torch.set_num_threads
// size it, as they sized libgomp's own teams before), capped at the CPUs the process may run
// on (sched_getaffinity) and at 64. It is 1, and `fn` runs whole on the caller, when the pool
// is busy with another call (two host threads calling kernels of one library at once, or a
// kernel called from a pool thread), or when no thread could be started (the failure is not
// an error: the work gets done).
//
// Chunks are bound to threads only as a preference: thread t of the team (the caller is 0,
// the workers 1, 2, ... in the order they were started) claims the chunks of its own segment
// [4t, 4t + 4) first, then whatever is left of the next segments in turn, one at a time (a
// compare-and-swap of the segment's word, which holds the job's generation and the segment's
// next chunk). So each thread runs the same part of every parallel loop's range call after
// call, and where consecutive layers cut their ranges alike (blocked convolutions sliced by
// positions, depthwise layers by rows: Stage::parallel_slices) a core reads what it wrote
// itself. Models on 2 threads of the 2-core Zen 5 VM, library against library interleaved,
// against one word that every thread claimed from in turn (2026-12-01,
// docs/results/pool-own-segments-2026-12-01-zen5.txt): 1.04-1.13x with the machine busy,
// 1.01-1.04x in a quieter hour; 1 thread, the same code, 0.99-1.02x. And a worker that is
// asleep, or not scheduled because other processes hold the CPUs, delays nothing: the others
// run what it did not claim, and the caller waits only for chunks being run. (A pool that
// hands chunk i to worker i waits a scheduler time slice for a preempted worker: with two
// busy processes on the 2-core VM, a 33x17x9 matmul took 75 us a call that way, 1.0-1.5 us
// this way, and a loaded `ctest -j2` hit a measurement's 10 s time limit.)
//
// Why not libgomp's GOMP_parallel: its fork and join of a team cost 2.5-3 us on a 2-core
// znver5 VM even with OMP_WAIT_POLICY=active (measured: two 7.3 us halves took 10 us), a
// third of a 97x131x67 matmul, where this pool's cost 0.15 us. Idle workers spin on the job
// word for 200 us after their last job (pause/yield between reads) and then sleep on a
// condition variable; the caller, once its chunks are done, spins until the claimed ones
// are, yielding its CPU after about 1,000 reads.
//
// The pool lives in the shared library (hidden globals of weak linkage and a weak ODR launch
// function: every object of a model's library emits the same definitions and the linker keeps
// one), so each library has its own; its threads start at the first parallel call and are
// never joined (the library is linked -z nodelete). A process that calls several libraries in turn has a pool for each: a
// pool whose workers slept can take up to about 20 ms of calls before its worker runs beside
// the caller rather than sharing the caller's CPU (measured with two libraries on the 2-core
// VM, docs/results/matmul-pool-2026-11-26.txt); one library (a model, a tuner measurement)
// does not see it. After fork() the child's pool is empty (an atfork handler forgets the
// parent's threads) and starts threads of its own at its next parallel call.
#pragma once

namespace llvm {
class Function;
class Module;
}  // namespace llvm

namespace tf {

struct Target;

// The module's `void @tf_parallel_launch(ptr fn, ptr data)`, defined (with the pool) on first
// use. `fn` has the type `void (ptr data, i32 tid, i32 n)`. CPU targets on Linux (glibc).
llvm::Function* parallel_launch_function(llvm::Module& m, const Target& target);

}  // namespace tf
