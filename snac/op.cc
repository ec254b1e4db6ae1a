#include "snac/op.h"

namespace purlin::snac {

const char* name_of(CollKind k) {
  switch (k) {
#define PURLIN_NAME(kind, decl, name, forward) \
  case CollKind::kind: return name;
    PURLIN_COLLECTIVES(PURLIN_NAME)
#undef PURLIN_NAME
  }
  return "?";
}

}  // namespace purlin::snac
