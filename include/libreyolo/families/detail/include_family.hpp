// Included once per line of families/list.hpp by registry.hpp (Boost.PP file iteration): includes
// <libreyolo/families/<folder>/family.hpp> for the line BOOST_PP_ITERATION(). No include guard.
#define LIBREYOLO_FAMILY_DIR_ BOOST_PP_TUPLE_ELEM(2, 0, BOOST_PP_SEQ_ELEM(BOOST_PP_ITERATION(), LIBREYOLO_FAMILY_SEQ_))
#include BOOST_PP_STRINGIZE(libreyolo/families/LIBREYOLO_FAMILY_DIR_/family.hpp)
#undef LIBREYOLO_FAMILY_DIR_
