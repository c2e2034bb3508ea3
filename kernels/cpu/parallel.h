/// @file
/// When a loop is worth OpenMP's threads.
///
/// A parallel region wakes every thread of the team at its start and waits for each at its
/// end. Threads that spin while they wait make that a matter of microseconds; threads that
/// sleep (OMP_WAIT_POLICY=passive, which scripts/test.sh sets so that waiting threads leave
/// their core to the other tests) are woken by a system call and must then be scheduled, and
/// on a machine whose cores are all busy a woken thread waits for a time slice: one region
/// can cost a millisecond. A unit test updating a few hundred small tensor slices took 22 s
/// on 2 threads and 0.45 s on 1, next to one other busy process (layout_ranks, 13 s of it in
/// the kernel's futex calls).
///
/// So a loop smaller than about 30 microseconds of one thread's work runs on the calling
/// thread alone (`#pragma omp parallel for if (parallel : worth_threads(n))`). Every loop
/// marked so computes each output the same way whichever thread runs it, and no sum's order
/// depends on the team's size, so the bits are the same either way
/// (tests/ops/test_thread_count.cpp). A GPT-2 124M step's activations and products are far
/// above these sizes and keep every thread; what runs alone there is the work on small
/// tensors (a layernorm's 768 weights), which the threads only slowed.
#pragma once

#include <cstddef>

namespace gpt::cpu {

/// Streaming loops (elementwise ops, rows of layernorm or softmax): elements touched.
inline constexpr double kParallelMinElements = 32768;
/// Products (GEMM, attention): multiply-adds; vectorised, each costs far less than an element
/// streamed from memory.
inline constexpr double kParallelMinMacs = 2097152;

/// True when a streaming loop over `elements` elements is worth waking the other threads.
inline bool worth_threads(double elements) { return elements >= kParallelMinElements; }
/// True when a product of `macs` multiply-adds is worth waking the other threads.
inline bool worth_threads_macs(double macs) { return macs >= kParallelMinMacs; }

}  // namespace gpt::cpu
