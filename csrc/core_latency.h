#pragma once
// How far apart two CPUs are, as the time a cache line takes to go between
// them and back. On a VM the host places the vCPUs: this 2-vCPU Zen 4 guest
// measures about 55, 200-300 or 550-750 ns (105, 300 and 550-850 beside a
// loaded target), the placement changing every few seconds, and at the
// farthest a multi-row forward, whose threads exchange every op's rows and
// meet at ~500 barriers, is slower while a decode step is not
// (bench/README.md). Benchmarks tag their samples with it.

namespace ggspec {

// The mean round trip in ns of a cache line bounced `trips` times between a
// thread pinned to cpu_a and one pinned to cpu_b; negative where threads
// cannot be pinned (not Linux, or no such CPU).
double core_round_trip_ns(int cpu_a, int cpu_b, int trips);

}  // namespace ggspec
