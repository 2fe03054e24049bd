# `cmake --install` and `cpack -G DEB` (run in the build folder): the
# program, the CUDA module where built, the Python module (python/), the
# examples and the docs, as one Debian package for every node of a cluster.
install(TARGETS gradwire RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET gradwire_cuda)
  # Opened at run time from <bin>/../lib/gradwire (kernels/cuda_loader.cpp).
  install(TARGETS gradwire_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/gradwire)
endif()
if(TARGET gradwire_torch)
  # model.kind = "torch", opened from <bin>/../lib/gradwire (models/torch_layer.cpp).
  install(TARGETS gradwire_torch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/gradwire)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/gradwire/examples)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_PACKAGE_NAME gradwire)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed deep-learning training from actors (CAF, UCX)")
set(CPACK_PACKAGE_CONTACT "gradwire developers <gradwire@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # gradwire_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# The shared libraries the program and the modules link, from dpkg-shlibdeps;
# the CUDA toolkit's own (outside Debian) are looked up where it is installed.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
if(TARGET gradwire_cuda)
  get_filename_component(_gw_cudnn_dir "${CUDNN_LIBRARY}" DIRECTORY)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CUDAToolkit_LIBRARY_DIR} ${_gw_cudnn_dir})
endif()
# What a run uses when present: oneDNN's GEMMs and convolutions (opened at
# run time), gnuplot for report.html's plots, Fashion-MNIST and fortunes
# for the examples, pandas and matplotlib for the Python module's tables
# and examples/analysis.py, PyTorch for model.kind = "torch".
if(GRADWIRE_HAVE_PYTHON) # the module is built for this Python's ABI
  math(EXPR _gw_next_minor "${Python_VERSION_MINOR} + 1")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "python3 (>= ${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}), python3 (<< ${Python_VERSION_MAJOR}.${_gw_next_minor})")
endif()
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
    "libdnnl2, gnuplot-nox, dataset-fashion-mnist, fortunes, python3-pandas, python3-matplotlib, python3-torch")
include(CPack)
