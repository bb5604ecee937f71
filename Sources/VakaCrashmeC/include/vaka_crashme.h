void vaka_crashme_placeholder(void);
