#include "actors/refuse.hpp"

#include "kernels/log.hpp"

#include <memory>

namespace gradwire::actors {

namespace {

constexpr std::size_t shown_chars = 200; // of the message, in the log line

} // namespace

std::string refusal_text(const std::string& who, const std::string& rendered) {
  std::string shown = rendered.size() > shown_chars ? rendered.substr(0, shown_chars) + "..." : rendered;
  return who + ": refused a message it has no handler for: " + shown;
}

void refuse_unexpected(caf::scheduled_actor* self, std::string who) {
  auto refused = std::make_shared<std::int64_t>(0);
  self->set_default_handler([who = std::move(who), refused](caf::scheduled_actor*, caf::message_view& x)
                              -> caf::result<caf::message> {
    if (++*refused <= refusals_logged)
      log::warn("{}", refusal_text(who, x.content().stringify()));
    return caf::sec::unexpected_message;
  });
}

std::string error_text(caf::actor_system& sys, const caf::error& err) {
  const auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return sys.render(err);
}

} // namespace gradwire::actors
