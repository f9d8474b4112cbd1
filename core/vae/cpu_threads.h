// CPU threads for decoding on rank threads of one host.
#pragma once

namespace h3::vae {

// Sets the intra-op threads of the calling thread (at::set_num_threads) and, when the
// process runs on OpenBLAS, OpenBLAS's own thread pool, which at::set_num_threads does
// not reach: otherwise each rank's GEMMs still fan out over every core, and rank threads
// contend for OpenBLAS's pool. OpenBLAS's setting is process-wide.
void set_cpu_threads(int n);

}  // namespace h3::vae
