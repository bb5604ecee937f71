import Vaka
import VakaCrashmeC
