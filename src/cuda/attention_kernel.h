#pragma once
// Which attention kernel a CUDA executor runs (kernels.cu). Each gives every
// (row, head) exactly the same bits; they differ in how often, and when, keys
// and values are read.

namespace parspec::cuda {

enum class AttentionKernel {
  kPerHead,    // one block per (row, head, split)
  kGrouped,    // the query heads of a KV head in one block: each key read once per row
  kTiled,      // rows of a pass that share keys too: each shared key read once per tile of rows
  kPrestaged,  // the default: per head, for up to 8 rows, committed keys and values loaded
               // before the kernel before it ends, one-split rows merged in the block
};

}  // namespace parspec::cuda
