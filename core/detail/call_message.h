// Messages that invoke an actor method: Call (with a reply) and Tell (without).
#pragma once

#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/actor_type.h"
#include "core/detail/message.h"
#include "core/detail/message_pool.h"
#include "core/detail/remote_codec.h"
#include "core/future.h"

namespace troupe::detail {

// Invokes `method` on the actor object with the stored arguments, moved.
template <class T, class M, class Args>
decltype(auto) invoke_method(void* instance, M method, Args& args) {
  return std::apply(
      [&](auto&... a) -> decltype(auto) {
        return (static_cast<T*>(instance)->*method)(std::move(a)...);
      },
      args);
}

inline std::string_view method_name_at(const ActorTypeInfo* type, int index) {
  if (type == nullptr || index < 0) return {};
  return type->methods[static_cast<size_t>(index)].name;
}

inline uint64_t method_id_at(const ActorTypeInfo* type, int index) {
  if (type == nullptr || index < 0) return 0;
  return type->methods[static_cast<size_t>(index)].id;
}

// A call whose reply completes the caller's Future<U>. The message is also the
// future's state: one allocation per call. References: the caller's future,
// and the message while it is queued or running.
template <class T, class M, class U, class... P>
class Call final : public FutureState<U>, public Message {
 public:
  Call(M method, int method_index, std::tuple<P...> args)
      : method_(method), method_index_(method_index), args_(std::move(args)) {}

  void deliver(void* instance) override {
    auto invoke = [&] { return invoke_method<T>(instance, method_, args_); };
    complete_with<U>(this, invoke);
    this->release();
  }
  void reject(const absl::Status& why) override {
    this->set(why);
    this->release();
  }
  std::string_view method_name() const override {
    return method_name_at(MethodTable<T>::type, method_index_);
  }
  uint64_t method_id() const override { return method_id_at(MethodTable<T>::type, method_index_); }
  bool wants_reply() const override { return true; }
  absl::Status encode_args(Writer& out) override {
    if constexpr (!kResultCodable<U>) {
      return absl::UnimplementedError(
          absl::StrCat(std::string(method_name()),
                       " cannot be called in another process: its result type ", "has no Codec"));
    } else {
      return encode_args_tuple(out, args_, method_name(), ArgsLifetime::kUntilReply);
    }
  }
  void complete_remote(Reader& in) override {
    if constexpr (kResultCodable<U>) {
      this->set(from_result<U>(decode_result<U>(in)));
    } else {
      this->set(absl::InternalError("unexpected reply"));
    }
    this->release();
  }
  FutureStateBase* reply_state() override { return this; }

 private:
  M method_;
  int method_index_;
  std::tuple<P...> args_;
};

// A fire-and-forget call: the result, and any error value it returns, are
// dropped. An exception still fails the actor.
template <class T, class M, class... P>
class Tell final : public Message {
 public:
  TROUPE_POOLED_ALLOCATION()
  Tell(M method, int method_index, std::tuple<P...> args)
      : method_(method), method_index_(method_index), args_(std::move(args)) {}

  void deliver(void* instance) override {
    (void)invoke_method<T>(instance, method_, args_);
    delete this;
  }
  void reject(const absl::Status&) override { delete this; }
  std::string_view method_name() const override {
    return method_name_at(MethodTable<T>::type, method_index_);
  }
  uint64_t method_id() const override { return method_id_at(MethodTable<T>::type, method_index_); }
  absl::Status encode_args(Writer& out) override {
    return encode_args_tuple(out, args_, method_name(), ArgsLifetime::kUntilQueued);
  }

 private:
  M method_;
  int method_index_;
  std::tuple<P...> args_;
};

}  // namespace troupe::detail
