// The model seam (docs/models.md): what trainers, actors and checkpoints see of a model, whatever
// its architecture. An architecture (nn/gpt2, nn/llama) implements Model; create_model picks it
// from the config. Everything outside nn/ works through this header, layout.h and config.h.
//
// A model is a stack of L blocks between an embedding and a head, its parameters in ONE flat fp32
// buffer laid out as layout() says (segments with roles: embedding, blocks, head), its gradients
// in a second buffer of the same layout, so an optimizer or a shard can own any slice of either.
// The buffers live on the model's device (the CPU today: host memory the caller may read and
// write between calls); a device model keeps the same offsets in device memory.
//
//   auto model = create_model(config);         // then init_parameters(seed) or fill params()
//   model->zero_grad();
//   float loss = *model->forward(inputs, targets, B, T);
//   model->backward();                         // grads() += d loss / d params
//
// Pipelines run it in pieces over blocks [begin, end), each micro-batch in an activation slot:
//   forward()  = prepare(B, T); embed_forward(inputs); forward_blocks(0, L); head_forward(targets)
//   backward() = head_backward(dloss); backward_blocks(0, L); embed_backward()
// A stage that does not start at block 0 writes the activation it receives into residual(begin)
// before forward_blocks, and sends residual(end) onwards; in backward it writes the gradient it
// receives for residual(end) into dresidual() and, after backward_blocks, sends dresidual() back.
// Each piece REQUIRES the pieces before it ran for the current (B, T).
//
// Tensor parallelism (Megatron-LM): a model created with a TensorSlice holds rank r's slice of the
// parameters (layout.h) and computes its heads, its part of the MLP and its rows of the
// vocabulary, calling the group's all-reduces (set_tensor_parallel) where the math needs the
// whole. Every rank of the group runs the same pieces on the same inputs.
//
// Incremental decoding (nn/model/decoder.h): a whole model makes a Decoder that keeps a KV cache,
// so that generating a token costs one position rather than the whole prefix:
//   auto decoder = model->make_decoder(B, capacity);
//   decoder->append(prompts, T);  then  decoder->append(next, 1);  ...  (logits in between)
//
// Not thread-safe: one caller at a time. Deterministic: the same inputs and parameters give
// bitwise the same logits, loss and gradients for a fixed thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/device.h"
#include "nn/dtype.h"
#include "nn/layers/parallel.h"
#include "nn/model/config.h"
#include "nn/model/decoder.h"
#include "nn/model/layout.h"

namespace troupe::nn {

struct ModelOptions {
  // When true, the forward keeps per block only what backward cannot cheaply recompute (the
  // block's input, the projections' outputs, the norms' statistics) and backward recomputes the
  // rest block by block into one block's buffers. Gradients are bitwise the same.
  bool recompute_activations = false;
  // The matrix products' input precision on a device that has 16-bit tensor cores (CUDA): with
  // kBFloat16 or kFloat16 each product's operands are rounded to it and the products accumulate
  // in fp32, as torch.autocast's do; every other kernel computes in fp32. The CPU computes every
  // product in fp32 whatever this says (mixed precision there rounds the weights: docs/design.md).
  DType matmul = DType::kFloat32;

  friend bool operator==(const ModelOptions&, const ModelOptions&) = default;
};

// Which of its two flat buffers a model allocates. A buffer it does not own is bound by the
// caller, range by range (bind_parameters, bind_gradients): ZeRO keeps only a partition of the
// parameters or gradients whole and binds each block to a gathered copy or a bucket just before
// it runs; a pipeline stage binds only its own range.
//
// `device` is where the model computes and keeps its buffers, activations and caches
// (nn/device.h; docs/gpu.md): its backend makes it (nn/device_backend.h). The CPU's models are
// those of nn/gpt2 and nn/llama; the CUDA backend's are in nn/cuda (docs/gpu.md says which
// architectures and options it runs).
struct ModelStorage {
  bool parameters = true;
  bool gradients = true;
  Device device = Device::cpu();
};

// Bytes held by a model, by category. They are also counted in MemoryTracker::global() (memory.h)
// under parameters, gradients and activations (both activation categories).
struct ModelMemory {
  size_t parameters = 0;
  size_t gradients = 0;
  size_t activations = 0;  // what the forward keeps for backward, for the largest (B, T), all slots
  size_t activation_gradients = 0;  // backward's scratch, for the largest (B, T)
  size_t total() const { return parameters + gradients + activations + activation_gradients; }
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const ModelOptions& options() const = 0;
  // Where it computes and keeps its buffers (ModelStorage::device): params(), grads(),
  // residual(), dresidual() and logits() point into this device's memory.
  virtual Device device() const { return Device::cpu(); }
  const TensorSlice& tensor_slice() const { return layout().slice(); }
  // Where each parameter lives (this rank's slice's layout under tensor parallelism).
  virtual const ModelLayout& layout() const = 0;
  size_t num_params() const { return layout().num_params(); }

  // The tensor-parallel group's element-wise sum and max all-reduces (nn/layers/parallel.h gives
  // their contract). REQUIRED before the first piece runs when tensor_slice().size > 1; a
  // collective's error ends the piece that called it with that error.
  virtual void set_tensor_parallel(AllReduceFn allreduce_sum, AllReduceFn allreduce_max) = 0;

  // The architecture's initialisation, reproducible from seed (nn::init_parameters below); a
  // tensor-parallel rank gets its slice of the whole model's values. REQUIRES: the model owns its
  // parameters (ModelStorage); else init_parameters below fills the caller's buffer.
  virtual void init_parameters(uint64_t seed) = 0;

  // The flat buffers: num_params() floats each, laid out as layout() says. The caller may read
  // and write them between calls. Null for a buffer the model does not own (ModelStorage).
  virtual float* params() = 0;
  virtual float* grads() = 0;
  const float* params() const { return const_cast<Model*>(this)->params(); }
  const float* grads() const { return const_cast<Model*>(this)->grads(); }

  // Runs the model on inputs [B, T] (token ids < V). With targets [B, T] (ids < V) returns the
  // mean cross-entropy over the B*T positions and readies backward(); without (null) returns NaN
  // and only the logits are computed. InvalidArgument when B < 1, T < 1, T > max_seq_len or a
  // token id is out of range (nothing is run); ResourceExhausted without the memory.
  [[nodiscard]] virtual absl::StatusOr<float> forward(const int32_t* inputs, const int32_t* targets,
                                                      int B, int T) = 0;
  // Accumulates into grads() the gradient of dloss * (the last forward's loss): dloss = 1 for a
  // plain step, 1/n to average n accumulated micro-batches. FailedPrecondition unless the last
  // forward had targets.
  [[nodiscard]] virtual absl::Status backward(float dloss = 1.0f) = 0;
  // Sets every gradient of the model's own gradient buffer to zero.
  virtual void zero_grad() = 0;

  // Points the parameter (gradient) tensors that lie in [begin, end) of the flat layout at
  // `base`, which holds that range laid out as the flat buffer does (the tensor at offset o reads
  // base + o - begin); it stays owned by the caller and must outlive its use. A piece REQUIRES
  // every tensor it reads or writes to be bound. FailedPrecondition if the model owns that
  // buffer; InvalidArgument if [begin, end) cuts through a tensor or leaves the buffer.
  [[nodiscard]] virtual absl::Status bind_parameters(size_t begin, size_t end, float* base) = 0;
  [[nodiscard]] virtual absl::Status bind_gradients(size_t begin, size_t end, float* base) = 0;

  // logits [B, T, Vp] of the last head_forward (columns [V, Vp) are padding, not part of the
  // softmax); a tensor-parallel rank's [B, T, Vp/tp], its columns of the vocabulary.
  virtual const float* logits() const = 0;

  // --- Pieces, for pipeline stages (see the top of this file). ---

  // Keeps activations only for blocks [block_begin, block_end), and for the head only when
  // `head`. Then residual(l) exists for l in [block_begin, block_end]; embed_forward needs
  // block_begin = 0, the head block_end = L. Takes effect at the next prepare(). InvalidArgument
  // unless 0 <= block_begin < block_end <= L and, with `head`, block_end = L.
  [[nodiscard]] virtual absl::Status set_part(int block_begin, int block_end, bool head) = 0;
  // Holds `n` sets of activations, one for each micro-batch between its forward and its
  // backward; use_slot(j) makes set j current. Backward's scratch is shared: a backward runs
  // start to end on one slot. Takes effect at the next prepare(). InvalidArgument unless n >= 1.
  [[nodiscard]] virtual absl::Status set_activation_slots(int n) = 0;
  virtual int activation_slots() const = 0;
  // REQUIRES: 0 <= j < activation_slots().
  virtual void use_slot(int j) = 0;

  // Sizes the activations for (B, T) (growing them if needed) and makes (B, T) current.
  [[nodiscard]] virtual absl::Status prepare(int B, int T) = 0;
  // residual(0) = the embedding of inputs. Copies inputs (for embed_backward).
  [[nodiscard]] virtual absl::Status embed_forward(const int32_t* inputs) = 0;
  // residual(l + 1) = block l (residual(l)) for l in [begin, end).
  [[nodiscard]] virtual absl::Status forward_blocks(int begin, int end) = 0;
  // logits from residual(L); with targets, returns the mean loss (else NaN).
  [[nodiscard]] virtual absl::StatusOr<float> head_forward(const int32_t* targets) = 0;
  // Sets dresidual() to the gradient for residual(L) and accumulates the head's gradients (a tied
  // head's into the token embedding's).
  [[nodiscard]] virtual absl::Status head_backward(float dloss = 1.0f) = 0;
  // For l from end - 1 down to begin: accumulates block l's parameter gradients and turns
  // dresidual() from the gradient for residual(l + 1) into the one for residual(l).
  //
  // `on_final`, when set, is called each time a run of a block's tensors has its gradients
  // final, with the run's first offset: layout().backward_marks(l), in order. From that offset
  // up to block_begin(end) every gradient is final for this backward; data parallelism starts
  // reducing them there.
  using GradientsFinal = std::function<void(size_t final_from)>;
  [[nodiscard]] virtual absl::Status backward_blocks(int begin, int end,
                                                     const GradientsFinal& on_final = nullptr) = 0;
  // Accumulates the embedding's gradients from dresidual() (the gradient for residual(0)).
  [[nodiscard]] virtual absl::Status embed_backward() = 0;
  // embed_backward() with the token embedding's gradient accumulated into `rows` [num_rows, C]
  // instead: token v's row is rows[row_of[v]]; the embedding's other tensors as embed_backward.
  // Data parallelism reduces the few rows a batch touches this way.
  // REQUIRES: row_of.size() >= vocab_size; row_of[v] in [0, num_rows) for every token v of the
  // current batch (checked: InvalidArgument naming the token, and nothing accumulated);
  // FailedPrecondition on a tensor-parallel rank (tp > 1).
  [[nodiscard]] virtual absl::Status embed_backward_rows(float* rows,
                                                         std::span<const int32_t> row_of,
                                                         int num_rows) = 0;

  // The residual stream [B, T, C] entering block l, l in [0, L] (in the part: set_part).
  // REQUIRES: prepare() ran.
  virtual float* residual(int l) = 0;
  // The gradient of the residual stream [B, T, C] at the block boundary backward last reached.
  virtual float* dresidual() = 0;

  // What this model holds now.
  virtual ModelMemory memory() const = 0;

  // --- Incremental decoding (nn/model/decoder.h). ---

  // A decoder of `batch` rows of up to `capacity` positions each over this model's parameters,
  // its KV cache allocated here (ResourceExhausted without the memory). It reads the parameters
  // at every append and REQUIRES this model to outlive it, unmoved. Whole models only:
  // FailedPrecondition for a tensor-parallel rank (tensor_slice().size > 1), a pipeline part
  // (set_part other than every block with the head) or parameters not all bound;
  // InvalidArgument unless batch >= 1 and 1 <= capacity <= max_seq_len; Unimplemented for an
  // architecture without one (this default).
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Decoder>> make_decoder(int batch,
                                                                              int capacity);
};

// A model of `config`: its architecture's. InvalidArgument when the config is not valid or does
// not split into the slice, ResourceExhausted without the memory. Parameters and gradients are
// zero; activations are allocated by the first forward (or prepare).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Model>> create_model(const ModelConfig& config,
                                                                  const ModelOptions& options = {},
                                                                  const ModelStorage& storage = {},
                                                                  const TensorSlice& slice = {});

namespace detail {
// create_model on the CPU: the architectures of nn/gpt2 and nn/llama (the CPU backend's).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Model>> create_cpu_model(const ModelConfig& config,
                                                                      const ModelOptions& options,
                                                                      const ModelStorage& storage,
                                                                      const TensorSlice& slice);
}  // namespace detail

// OK, or InvalidArgument naming what does not divide over slice.size ranks (heads, KV heads, the
// MLP, the padded vocabulary), or a rank outside [0, size).
[[nodiscard]] absl::Status validate_slice(const ModelConfig& config, const TensorSlice& slice);

// How many tensors a model of `config` has (what model_layout(config).tensors().size() says),
// without making the layout. REQUIRES: config.validate() is OK.
size_t count_tensors(const ModelConfig& config);

// The layout of tensor-parallel rank `slice` of a model of `config`, without the model.
// REQUIRES: config.validate() and validate_slice(config, slice) are OK.
ModelLayout model_layout(const ModelConfig& config, const TensorSlice& slice = {});

// The range [begin, end) of what Model::init_parameters(seed) gives rank `slice` of a model of
// `config`, into `out` (end - begin floats), without the memory for the rest: a parameter shard
// initialises its partition. REQUIRES: as model_layout; begin <= end <= its num_params().
void init_parameters(const ModelConfig& config, const TensorSlice& slice, uint64_t seed,
                     size_t begin, size_t end, float* out);

}  // namespace troupe::nn
