cmake_policy(SET CMP0057 NEW)
# Fails if a file outside nn/ names a tensor of one architecture or reaches past the model seam
# (docs/models.md): trainers, actors, checkpoints, the CLI and the core see a model through
# nn/model/ only. Run as: cmake -DROOT=<repo> -P check_model_seam.cmake
set(dirs actors checkpoint cli core trainers transport)
# Whole words: GPT-2's tensors (troupe's and Hugging Face's names), Llama's, and the types and
# headers behind the seam.
set(words
  wte wpe lnfw lnfb ln1w ln1b ln2w ln2b qkvw qkvb attprojw attprojb fcw fcb fcprojw fcprojb
  c_attn c_proj c_fc ln_1 ln_2 ln_f
  embed_tokens lm_head q_proj k_proj v_proj o_proj gate_proj up_proj down_proj input_layernorm
  post_attention_layernorm
  BlockTensor LlamaTensor GPTParamLayout LlamaLayout GPTTensors
  "nn/gpt2/" "nn/llama/" "nn::GPT\\b" "nn::Llama\\b")

set(violations "")
foreach(dir IN LISTS dirs)
  file(GLOB_RECURSE sources "${ROOT}/${dir}/*.h" "${ROOT}/${dir}/*.cc" "${ROOT}/${dir}/*.cu")
  foreach(src IN LISTS sources)
    file(RELATIVE_PATH rel "${ROOT}" "${src}")
    foreach(word IN LISTS words)
      if(word MATCHES "/" OR word MATCHES "::")
        set(pattern "${word}")
      else()
        set(pattern "(^|[^A-Za-z0-9_])${word}([^A-Za-z0-9_]|$)")
      endif()
      file(STRINGS "${src}" hits REGEX "${pattern}")
      foreach(line IN LISTS hits)
        string(STRIP "${line}" line)
        string(REPLACE ";" "," line "${line}")
        list(APPEND violations "${rel}: ${word}: ${line}")
      endforeach()
    endforeach()
  endforeach()
endforeach()

if(violations)
  list(JOIN violations "\n" text)
  message(FATAL_ERROR "architecture names outside nn/ (use nn/model/):\n${text}")
endif()
message(STATUS "model seam: ok")
