/* CVakaDw defines vaka_libdw() and vaka_libdw_error(), declared with libdw's function table in
 * Sources/CLibdw/shim.h (the CLibdw module, which VakaSymbolication imports); nothing else is exported. */
